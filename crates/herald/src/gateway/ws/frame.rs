//! Decoding a client's WebSocket frames (RFC 6455, server side): headers,
//! masking, fragmented messages, control frames, and every rule whose breach
//! fails the connection with 1002, 1007 or 1009. Pure: bytes in, events out;
//! no socket, no buffer of its own beyond a fragmented message's.

/// Frame opcodes.
pub(crate) const OP_CONTINUATION: u8 = 0x0;
pub(crate) const OP_TEXT: u8 = 0x1;
pub(crate) const OP_BINARY: u8 = 0x2;
pub(crate) const OP_CLOSE: u8 = 0x8;
pub(crate) const OP_PING: u8 = 0x9;
pub(crate) const OP_PONG: u8 = 0xA;

/// Largest payload of a control frame (RFC 6455 5.5).
const CONTROL_MAX: u64 = 125;
/// Smallest header of a client frame: two bytes and the mask.
const MIN_HEADER: usize = 2 + 4;

/// Close codes a failure is reported with.
pub(crate) const PROTOCOL_ERROR: u16 = 1002;
pub(crate) const INVALID_DATA: u16 = 1007;
pub(crate) const TOO_BIG: u16 = 1009;

/// Why the connection fails: the close code to send and its reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fail {
    pub code: u16,
    pub reason: &'static str,
}

const fn fail(code: u16, reason: &'static str) -> Fail {
    Fail { code, reason }
}

/// What one frame meant.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Event<'a> {
    /// A whole text message, valid UTF-8.
    Text(&'a str),
    /// A whole binary message.
    Binary(&'a [u8]),
    Ping(&'a [u8]),
    Pong,
    /// The peer closes, with a valid code and UTF-8 reason if it gave one.
    Close(Option<(u16, &'a str)>),
    /// A fragment of a message still incomplete: nothing to hand out yet.
    Fragment,
}

/// The decoding state between frames: the fragmented message being put
/// together, if any. Idle, it holds nothing. The size limit is the caller's
/// to keep (a connection packs it with its flags).
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    message: Option<Box<Fragments>>,
}

/// A fragmented message so far.
#[derive(Debug)]
struct Fragments {
    text: bool,
    data: Vec<u8>,
    /// Length of `data`'s prefix known to be valid UTF-8 (text only): each
    /// fragment is checked as it comes, so a bad one fails at once.
    valid: usize,
    /// The final fragment was decoded and handed out; dropped on the next call.
    complete: bool,
}

impl Decoder {
    /// Drops a fragmented message already handed out.
    pub(crate) fn release(&mut self) {
        if self.message.as_ref().is_some_and(|m| m.complete) {
            self.message = None;
        }
    }

    /// Decodes the frame at the start of `buf`, unmasking its payload in
    /// place; a message (and so a frame) over `limit` bytes fails with 1009. `Ok(None)`: `buf` does not hold the whole frame yet (its header
    /// is checked as soon as it is there, so a frame that can only fail does
    /// so before its payload is waited for). `Ok(Some((n, event)))`: the frame
    /// took `n` bytes.
    pub(crate) fn decode<'a>(&'a mut self, buf: &'a mut [u8], limit: u32) -> Result<Option<(usize, Event<'a>)>, Fail> {
        self.release();
        let Some((fin, opcode, header, len)) = self.header(buf, limit)? else { return Ok(None) };
        let end = header as u64 + len;
        if (buf.len() as u64) < end {
            return Ok(None);
        }
        let end = end as usize;
        let mask = [buf[header - 4], buf[header - 3], buf[header - 2], buf[header - 1]];
        let payload = &mut buf[header..end];
        unmask(payload, mask);
        let event = match opcode {
            OP_TEXT | OP_BINARY if fin => {
                if opcode == OP_BINARY {
                    Event::Binary(payload)
                } else {
                    Event::Text(std::str::from_utf8(payload).map_err(|_| fail(INVALID_DATA, "invalid UTF-8"))?)
                }
            }
            OP_TEXT | OP_BINARY => {
                let mut m = Fragments { text: opcode == OP_TEXT, data: payload.to_vec(), valid: 0, complete: false };
                m.check()?;
                self.message = Some(Box::new(m));
                Event::Fragment
            }
            OP_CONTINUATION => {
                let m = self.message.as_mut().expect("checked by header");
                m.data.extend_from_slice(payload);
                m.check()?;
                if !fin {
                    return Ok(Some((end, Event::Fragment)));
                }
                m.complete = true;
                if !m.text {
                    Event::Binary(&m.data)
                } else if m.valid == m.data.len() {
                    // Checked fragment by fragment: valid up to `valid`.
                    Event::Text(std::str::from_utf8(&m.data).map_err(|_| fail(INVALID_DATA, "invalid UTF-8"))?)
                } else {
                    return Err(fail(INVALID_DATA, "invalid UTF-8"));
                }
            }
            OP_PING => Event::Ping(payload),
            OP_PONG => Event::Pong,
            _ => close_event(payload)?, // OP_CLOSE: the header allows no other
        };
        Ok(Some((end, event)))
    }

    /// Reads and checks a frame header: (fin, opcode, header length, payload
    /// length), or `None` if `buf` is too short to hold it.
    fn header(&self, buf: &[u8], limit: u32) -> Result<Option<(bool, u8, usize, u64)>, Fail> {
        let [b0, b1, ..] = *buf else { return Ok(None) };
        let fin = b0 & 0x80 != 0;
        if b0 & 0x70 != 0 {
            return Err(fail(PROTOCOL_ERROR, "reserved bits set"));
        }
        let opcode = b0 & 0x0F;
        match opcode {
            OP_CONTINUATION if self.message.is_none() => {
                return Err(fail(PROTOCOL_ERROR, "continuation outside a message"));
            }
            OP_TEXT | OP_BINARY if self.message.is_some() => {
                return Err(fail(PROTOCOL_ERROR, "new message inside a fragmented one"));
            }
            OP_CONTINUATION | OP_TEXT | OP_BINARY => {}
            OP_CLOSE | OP_PING | OP_PONG => {
                if !fin {
                    return Err(fail(PROTOCOL_ERROR, "fragmented control frame"));
                }
                if u64::from(b1 & 0x7F) > CONTROL_MAX {
                    return Err(fail(PROTOCOL_ERROR, "control frame too long"));
                }
            }
            _ => return Err(fail(PROTOCOL_ERROR, "reserved opcode")),
        }
        if b1 & 0x80 == 0 {
            return Err(fail(PROTOCOL_ERROR, "unmasked client frame"));
        }
        let (extra, len) = match b1 & 0x7F {
            126 => match buf.get(2..4) {
                Some(b) => (2, u64::from(u16::from_be_bytes([b[0], b[1]]))),
                None => return Ok(None),
            },
            127 => match buf.get(2..10) {
                Some(b) => {
                    let len = u64::from_be_bytes(b.try_into().expect("8 bytes"));
                    if len >> 63 != 0 {
                        return Err(fail(PROTOCOL_ERROR, "frame length's top bit set"));
                    }
                    (8, len)
                }
                None => return Ok(None),
            },
            n => (0, u64::from(n)),
        };
        let before = self.message.as_ref().map_or(0, |m| m.data.len() as u64);
        if before + len > u64::from(limit) {
            return Err(fail(TOO_BIG, "message too big"));
        }
        let header = MIN_HEADER + extra;
        if buf.len() < header {
            return Ok(None);
        }
        Ok(Some((fin, opcode, header, len)))
    }
}

impl Fragments {
    /// Checks the UTF-8 of a text message's data added since the last check;
    /// an incomplete character at the end waits for the next fragment.
    fn check(&mut self) -> Result<(), Fail> {
        if !self.text {
            return Ok(());
        }
        match std::str::from_utf8(&self.data[self.valid..]) {
            Ok(_) => self.valid = self.data.len(),
            Err(e) if e.error_len().is_some() => return Err(fail(INVALID_DATA, "invalid UTF-8")),
            Err(e) => self.valid += e.valid_up_to(),
        }
        Ok(())
    }
}

/// A close frame's payload: nothing, or a valid code and a UTF-8 reason.
fn close_event(payload: &[u8]) -> Result<Event<'_>, Fail> {
    match payload {
        [] => Ok(Event::Close(None)),
        [_] => Err(fail(PROTOCOL_ERROR, "close payload of one byte")),
        [hi, lo, reason @ ..] => {
            let code = u16::from_be_bytes([*hi, *lo]);
            if !valid_close_code(code) {
                return Err(fail(PROTOCOL_ERROR, "invalid close code"));
            }
            let reason =
                std::str::from_utf8(reason).map_err(|_| fail(INVALID_DATA, "invalid UTF-8 in close reason"))?;
            Ok(Event::Close(Some((code, reason))))
        }
    }
}

/// Codes a peer may send (RFC 6455 7.4): the defined ones that may appear on
/// the wire, and the ranges for libraries and applications.
fn valid_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// XORs `payload` with the 4-byte `mask`, word by word where it can.
fn unmask(payload: &mut [u8], mask: [u8; 4]) {
    let word = u32::from_ne_bytes(mask);
    let mut chunks = payload.chunks_exact_mut(4);
    for c in &mut chunks {
        let v = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]) ^ word;
        c.copy_from_slice(&v.to_ne_bytes());
    }
    for (b, m) in chunks.into_remainder().iter_mut().zip(mask) {
        *b ^= m;
    }
}

/// Writes a server frame's header (never masked) for `len` payload bytes
/// into `out`; returns its length (2, 4 or 10).
pub(crate) fn encode_header(opcode: u8, len: usize, out: &mut [u8; 10]) -> usize {
    out[0] = 0x80 | opcode;
    if len < 126 {
        out[1] = len as u8;
        2
    } else if len <= usize::from(u16::MAX) {
        out[1] = 126;
        out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        4
    } else {
        out[1] = 127;
        out[2..10].copy_from_slice(&(len as u64).to_be_bytes());
        10
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

    /// A masked client frame.
    pub(crate) fn client_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut head = [0u8; 10];
        let n = encode_header(opcode, payload.len(), &mut head);
        let mut out = head[..n].to_vec();
        if !fin {
            out[0] &= 0x7F;
        }
        out[1] |= 0x80;
        out.extend_from_slice(&MASK);
        out.extend(payload.iter().zip(MASK.iter().cycle()).map(|(b, m)| b ^ m));
        out
    }

    /// What a decoder makes of `bytes` fed whole: the events, owned, and the failure if any.
    #[derive(Debug, PartialEq, Eq, Clone)]
    enum Owned {
        Text(String),
        Binary(Vec<u8>),
        Ping(Vec<u8>),
        Pong,
        Close(Option<(u16, String)>),
    }

    fn own(e: Event<'_>) -> Option<Owned> {
        Some(match e {
            Event::Text(t) => Owned::Text(t.to_owned()),
            Event::Binary(b) => Owned::Binary(b.to_vec()),
            Event::Ping(p) => Owned::Ping(p.to_vec()),
            Event::Pong => Owned::Pong,
            Event::Close(c) => Owned::Close(c.map(|(c, r)| (c, r.to_owned()))),
            Event::Fragment => return None,
        })
    }

    /// Decodes `chunks` as they would arrive, keeping the bytes of an
    /// incomplete frame until the next chunk, like the socket does.
    fn decode_chunks(limit: u32, chunks: &[&[u8]]) -> (Vec<Owned>, Option<Fail>) {
        let mut d = Decoder::default();
        let mut held: Vec<u8> = Vec::new();
        let mut out = Vec::new();
        for chunk in chunks {
            held.extend_from_slice(chunk);
            loop {
                match d.decode(&mut held, limit) {
                    Ok(Some((n, e))) => {
                        out.extend(own(e));
                        held.drain(..n);
                    }
                    Ok(None) => break,
                    Err(f) => return (out, Some(f)),
                }
            }
        }
        (out, None)
    }

    fn decode_all(bytes: &[u8]) -> (Vec<Owned>, Option<Fail>) {
        decode_chunks(1 << 20, &[bytes])
    }

    #[test]
    fn a_masked_text_frame_is_unmasked() {
        let (events, fail) = decode_all(&client_frame(true, OP_TEXT, b"{\"id\":1}"));
        assert_eq!(events, vec![Owned::Text("{\"id\":1}".into())]);
        assert_eq!(fail, None);
    }

    #[test]
    fn an_unmasked_frame_fails_with_1002() {
        let mut f = client_frame(true, OP_TEXT, b"hi");
        f[1] &= 0x7F;
        assert_eq!(decode_all(&f).1.map(|f| f.code), Some(PROTOCOL_ERROR));
    }

    #[test]
    fn lengths_of_16_and_64_bits_decode() {
        for len in [125usize, 126, 65_535, 65_536, 200_000] {
            let payload = vec![b'a'; len];
            let (events, fail) = decode_all(&client_frame(true, OP_BINARY, &payload));
            assert_eq!((events, fail), (vec![Owned::Binary(payload)], None), "length {len}");
        }
    }

    #[test]
    fn fragments_make_one_message_with_control_frames_between() {
        let mut bytes = client_frame(false, OP_TEXT, "héll".as_bytes());
        bytes.extend(client_frame(true, OP_PING, b"p"));
        bytes.extend(client_frame(false, OP_CONTINUATION, b"o, "));
        bytes.extend(client_frame(true, OP_PONG, b""));
        bytes.extend(client_frame(true, OP_CONTINUATION, b"world"));
        bytes.extend(client_frame(true, OP_BINARY, b"\x00\x01"));
        let (events, fail) = decode_all(&bytes);
        assert_eq!(fail, None);
        assert_eq!(
            events,
            vec![
                Owned::Ping(b"p".to_vec()),
                Owned::Pong,
                Owned::Text("héllo, world".into()),
                Owned::Binary(vec![0, 1])
            ]
        );
    }

    #[test]
    fn a_character_split_between_fragments_is_valid() {
        let s = "é".as_bytes();
        let mut bytes = client_frame(false, OP_TEXT, &s[..1]);
        bytes.extend(client_frame(true, OP_CONTINUATION, &s[1..]));
        assert_eq!(decode_all(&bytes), (vec![Owned::Text("é".into())], None));
    }

    #[test]
    fn invalid_utf8_fails_with_1007_at_the_bad_fragment() {
        assert_eq!(decode_all(&client_frame(true, OP_TEXT, b"\xff")).1.map(|f| f.code), Some(INVALID_DATA));
        // The bad fragment fails before the message's end arrives.
        let bytes = client_frame(false, OP_TEXT, b"ok \xc0\xaf");
        assert_eq!(decode_all(&bytes).1.map(|f| f.code), Some(INVALID_DATA));
        // A character cut off by the final fragment.
        let mut bytes = client_frame(false, OP_TEXT, b"ok");
        bytes.extend(client_frame(true, OP_CONTINUATION, &"é".as_bytes()[..1]));
        assert_eq!(decode_all(&bytes).1.map(|f| f.code), Some(INVALID_DATA));
    }

    #[test]
    fn fragmentation_rules_fail_with_1002() {
        let cont = client_frame(true, OP_CONTINUATION, b"x");
        assert_eq!(decode_all(&cont).1.map(|f| f.code), Some(PROTOCOL_ERROR));
        let mut bytes = client_frame(false, OP_TEXT, b"a");
        bytes.extend(client_frame(true, OP_TEXT, b"b"));
        assert_eq!(decode_all(&bytes).1.map(|f| f.code), Some(PROTOCOL_ERROR));
        let ping = client_frame(false, OP_PING, b"");
        assert_eq!(decode_all(&ping).1.map(|f| f.code), Some(PROTOCOL_ERROR));
    }

    #[test]
    fn control_frames_over_125_bytes_fail() {
        let f = client_frame(true, OP_PING, &[0u8; 126]);
        assert_eq!(decode_all(&f).1, Some(fail(PROTOCOL_ERROR, "control frame too long")));
        let (events, fail) = decode_all(&client_frame(true, OP_PING, &[7u8; 125]));
        assert_eq!((events, fail), (vec![Owned::Ping(vec![7; 125])], None));
    }

    #[test]
    fn reserved_bits_and_opcodes_fail_with_1002() {
        for rsv in [0x40u8, 0x20, 0x10] {
            let mut f = client_frame(true, OP_TEXT, b"a");
            f[0] |= rsv;
            assert_eq!(decode_all(&f).1, Some(fail(PROTOCOL_ERROR, "reserved bits set")));
        }
        for op in [3u8, 7, 0xB, 0xF] {
            let f = client_frame(true, op, b"");
            assert_eq!(decode_all(&f).1, Some(fail(PROTOCOL_ERROR, "reserved opcode")));
        }
    }

    #[test]
    fn oversize_fails_with_1009_from_the_header_alone() {
        let f = client_frame(true, OP_TEXT, &[b'a'; 2000]);
        // Only the header: the failure does not wait for the payload.
        assert_eq!(decode_chunks(1024, &[&f[..8]]).1.map(|f| f.code), Some(TOO_BIG));
        // Fragments that add up past the limit.
        let mut bytes = client_frame(false, OP_TEXT, &[b'a'; 600]);
        bytes.extend(client_frame(true, OP_CONTINUATION, &[b'a'; 600]));
        assert_eq!(decode_chunks(1024, &[&bytes]).1.map(|f| f.code), Some(TOO_BIG));
        assert_eq!(decode_chunks(1200, &[&bytes]).1, None);
    }

    #[test]
    fn close_codes_and_reasons_are_checked() {
        let close = |code: u16, reason: &[u8]| {
            let mut p = code.to_be_bytes().to_vec();
            p.extend_from_slice(reason);
            decode_all(&client_frame(true, OP_CLOSE, &p))
        };
        assert_eq!(decode_all(&client_frame(true, OP_CLOSE, b"")), (vec![Owned::Close(None)], None));
        for code in [1000u16, 1001, 1002, 1003, 1007, 1011, 3000, 4999] {
            assert_eq!(close(code, b"bye"), (vec![Owned::Close(Some((code, "bye".into())))], None), "{code}");
        }
        for code in [0u16, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535] {
            assert_eq!(close(code, b"").1.map(|f| f.code), Some(PROTOCOL_ERROR), "{code}");
        }
        assert_eq!(close(1000, b"\xff").1.map(|f| f.code), Some(INVALID_DATA));
        assert_eq!(decode_all(&client_frame(true, OP_CLOSE, b"\x03")).1.map(|f| f.code), Some(PROTOCOL_ERROR));
    }

    #[test]
    fn server_headers_have_the_shortest_length_form() {
        let mut h = [0u8; 10];
        assert_eq!((encode_header(OP_TEXT, 5, &mut h), &h[..2]), (2, &[0x81, 5][..]));
        assert_eq!((encode_header(OP_TEXT, 126, &mut h), &h[..4]), (4, &[0x81, 126, 0, 126][..]));
        assert_eq!(encode_header(OP_BINARY, 70_000, &mut h), 10);
        assert_eq!(&h[..10], &[0x82, 127, 0, 0, 0, 0, 0, 1, 0x11, 0x70]);
    }

    fn message() -> impl Strategy<Value = Vec<u8>> {
        // A few messages of each kind, some fragmented, pings between.
        let part = prop_oneof![
            "[a-zé€😀 ]{0,40}".prop_map(|s| client_frame(true, OP_TEXT, s.as_bytes())),
            proptest::collection::vec(any::<u8>(), 0..300).prop_map(|b| client_frame(true, OP_BINARY, &b)),
            ("[a-zé€😀]{0,30}", "[a-zé€😀]{0,30}").prop_map(|(a, b)| {
                let mut v = client_frame(false, OP_TEXT, a.as_bytes());
                v.extend(client_frame(true, OP_PING, b"x"));
                v.extend(client_frame(true, OP_CONTINUATION, b.as_bytes()));
                v
            }),
        ];
        proptest::collection::vec(part, 1..6).prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn a_stream_split_anywhere_decodes_the_same(bytes in message(), cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8)) {
            let whole = decode_all(&bytes);
            prop_assert_eq!(&whole.1, &None);
            let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            at.sort_unstable();
            let mut chunks = Vec::new();
            let mut from = 0;
            for cut in at {
                chunks.push(&bytes[from..cut]);
                from = cut;
            }
            chunks.push(&bytes[from..]);
            prop_assert_eq!(decode_chunks(1 << 20, &chunks), whole);
        }
    }
}
