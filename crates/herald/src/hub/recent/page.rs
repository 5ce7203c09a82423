//! Reading a chat's window: a `fetch` page ([`CachedPage`], encoded byte for byte as the store's
//! reply would be) and a watch replay's frames, each only where the window is exact for them (no
//! open stream in them, no file URL signed in an earlier hour).

use std::fmt::Write;

use super::Recent;
use crate::outbox::Frame;

/// A page of a chat's window for a `fetch` reply.
pub struct CachedPage {
    events: Vec<Frame>,
    cut: usize,
    /// The window's head: the reply's `seq`.
    pub head: u64,
    pub more: bool,
}

impl CachedPage {
    /// The `fetch` reply to request `id`, byte for byte what encoding a
    /// `FetchOk` of the same events gives.
    pub fn encode_reply(&self, id: i64) -> String {
        let body: usize = self.events.iter().map(|f| f.as_str().len() - self.cut + 2).sum();
        let mut out = String::with_capacity(body + 64);
        let _ = write!(out, r#"{{"id":{id},"ok":{{"events":["#);
        for (i, frame) in self.events.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push('{');
            out.push_str(&frame.as_str()[self.cut..]);
        }
        let _ = write!(out, r#"],"seq":{},"more":{}}}}}"#, self.head, self.more);
        out
    }

    /// Events in the page.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

/// The JSON of an event in a fetch reply, given its push frame's length.
fn event_len(frame: &Frame, cut: usize) -> usize {
    frame.as_str().len() - cut + 1
}

impl Recent {
    /// A fetch page of the events after `after`, at most `limit` of them and
    /// at most `max_bytes` of encoded events (always at least one), cut as
    /// the store's fetch is: `None` unless the window holds every event after
    /// `after` up to its head.
    pub(in crate::hub) fn page(&self, after: u64, limit: u32, max_bytes: usize) -> Option<CachedPage> {
        if self.start == 0 || after + 1 < self.start || after >= self.end() {
            return None;
        }
        if self.open_streams.range(after + 1..).next().is_some() {
            return None;
        }
        if self.stale_urls(after, self.end() - 1) {
            return None;
        }
        let head = self.end() - 1;
        let from = (after + 1 - self.start) as usize;
        let mut events = Vec::with_capacity((limit as usize).min(self.events.len() - from));
        let (mut bytes, mut cut_short) = (0usize, false);
        for cached in self.events.iter().skip(from).take(limit as usize) {
            bytes += event_len(&cached.frame, self.cut);
            if bytes > max_bytes && !events.is_empty() {
                cut_short = true;
                break;
            }
            events.push(cached.frame.clone());
            if bytes > max_bytes {
                cut_short = true;
                break;
            }
        }
        if cut_short {
            metrics::counter!("herald_fetch_pages_cut_total").increment(1);
        }
        let last = after + events.len() as u64;
        Some(CachedPage { events, cut: self.cut, head, more: cut_short || last < head })
    }

    /// The push frames of the events in `(after, upto]`, if the window holds them all.
    pub(in crate::hub) fn frames(&self, after: u64, upto: u64) -> Option<Vec<(u64, Frame)>> {
        if self.start == 0 || after + 1 < self.start || upto >= self.end() || upto < after {
            return None;
        }
        if self.open_streams.range(after + 1..=upto).next().is_some() {
            return None;
        }
        if self.stale_urls(after, upto) {
            return None;
        }
        let from = (after + 1 - self.start) as usize;
        let n = (upto - after) as usize;
        Some((after + 1..).zip(self.events.iter().skip(from).take(n).map(|c| c.frame.clone())).collect())
    }

    /// Whether an event in `(after, upto]` carries file URLs signed before this hour: those are
    /// read again from the store (which signs fresh ones).
    fn stale_urls(&self, after: u64, upto: u64) -> bool {
        let now = crate::model::UrlWindow::at(crate::store::now_ms()).start_ms;
        let from = (after + 1).saturating_sub(self.start) as usize;
        let n = (upto + 1).saturating_sub(after + 1) as usize;
        self.events
            .iter()
            .skip(from)
            .take(n)
            .any(|c| c.files_ms != 0 && crate::model::UrlWindow::at(c.files_ms).start_ms != now)
    }
}
