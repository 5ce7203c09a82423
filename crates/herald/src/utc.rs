//! Calendar dates of Unix times in UTC, for messages people read ("expired at 2026-11-29 05:03:37
//! UTC") and for signatures that name a day (S3's SigV4). No time-zone database: UTC only.

/// The proleptic Gregorian date of a day counted from 1970-01-01, by eras
/// of 400 years (146,097 days) that start on 1 March.
pub(crate) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153; // month from March = 0
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `YYYY-MM-DD HH:MM:SS UTC` of `secs` since the epoch.
pub(crate) fn text(secs: i64) -> String {
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", s / 3600, s % 3600 / 60, s % 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_read_as_utc_dates() {
        assert_eq!(super::text(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(super::text(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(super::text(1_795_928_617), "2026-11-29 05:03:37 UTC");
    }
}
