//! Drives herald's WebSocket layer (`gateway/ws`) the way a client's bytes
//! reach it: frames built from the input (any opcode, reserved bits, masked
//! or not, any length form, fragments, control frames in between) followed
//! by raw bytes, written from a loopback client cut at the input's points,
//! and read by a server socket exactly as a connection reads.
//!
//! Checked:
//! - however the bytes are cut (and however TCP joins the cuts), the server
//!   hands over the same messages, in the same order, and ends the same way
//!   as the frame decoder given all the bytes at once;
//! - reading ends only by a close frame, the peer going away, or a failure
//!   with 1002 (protocol), 1007 (bad UTF-8) or 1009 (too big), never a panic.

#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use herald::gateway::harness::{ws_decode, ws_read};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    /// Largest message, 0..=4095 bytes above 16.
    limit: u16,
    frames: Vec<Frame>,
    /// Where the stream is cut into writes.
    cuts: Vec<u16>,
    /// Raw bytes after the frames.
    tail: Vec<u8>,
}

#[derive(Arbitrary, Debug)]
struct Frame {
    fin: bool,
    rsv: u8,
    /// Below 230: one of the six defined opcodes; above: any 4-bit value.
    opcode: u8,
    unmasked: bool,
    mask: [u8; 4],
    /// 0: the shortest length form; 1: 16-bit; 2: 64-bit.
    length_form: u8,
    payload: Vec<u8>,
}

impl Frame {
    fn encode(&self, out: &mut Vec<u8>) {
        const DEFINED: [u8; 6] = [0x0, 0x1, 0x2, 0x8, 0x9, 0xA];
        let opcode = if self.opcode < 230 { DEFINED[usize::from(self.opcode) % 6] } else { self.opcode & 0x0F };
        let rsv = if self.rsv < 240 { 0 } else { (self.rsv & 0x07) << 4 };
        out.push(u8::from(self.fin) << 7 | rsv | opcode);
        let mask_bit = if self.unmasked { 0 } else { 0x80 };
        let len = self.payload.len();
        match (self.length_form % 3, len) {
            (0, 0..=125) => out.push(mask_bit | len as u8),
            (0 | 1, 0..=65535) => {
                out.push(mask_bit | 126);
                out.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                out.push(mask_bit | 127);
                out.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        if self.unmasked {
            out.extend_from_slice(&self.payload);
        } else {
            out.extend_from_slice(&self.mask);
            out.extend(self.payload.iter().zip(self.mask.iter().cycle()).map(|(b, m)| b ^ m));
        }
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime"))
}

fuzz_target!(|input: Input| {
    let limit = 16 + usize::from(input.limit % 4096);
    let mut bytes = Vec::new();
    for f in &input.frames {
        f.encode(&mut bytes);
    }
    bytes.extend_from_slice(&input.tail);
    let mut at: Vec<usize> = input.cuts.iter().map(|&c| usize::from(c) % (bytes.len() + 1)).collect();
    at.sort_unstable();
    at.dedup();
    let mut chunks = Vec::new();
    let mut from = 0;
    for cut in at {
        chunks.push(&bytes[from..cut]);
        from = cut;
    }
    chunks.push(&bytes[from..]);

    let whole = ws_decode(&bytes, limit);
    let read = runtime().block_on(ws_read(&chunks, limit)).expect("loopback");
    assert_eq!(read, whole, "cut at {chunks:?}");
    let end = read.1.as_str();
    assert!(matches!(end, "closed" | "gone" | "fail 1002" | "fail 1007" | "fail 1009"), "reading ended with {end}");
});
