//! The WebSocket layer's tests: reading frames cut anywhere, bad frames,
//! writing at once and what waits for a full socket, the upgrade's key.

use super::*;
use frame::tests::client_frame;
use frame::{OP_CONTINUATION, OP_PING};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A connected pair: the server's [`Socket`] and the client's stream.
async fn pair(limit: usize) -> (Socket, TcpStream) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    let (server, _) = listener.accept().await.unwrap();
    (Socket::new(server, Bytes::new(), limit), client)
}

/// Reads messages as a connection does, answering what the socket
/// queued, until reading ends.
async fn serve(mut ws: Socket) -> (Vec<String>, ReadEnd) {
    let mut got = Vec::new();
    loop {
        std::future::poll_fn(|cx| ws.poll_readable(cx)).await.unwrap();
        let read = ws.read(|m| match m {
            Message::Text(t) => format!("text {t}"),
            Message::Binary(b) => format!("binary {}", b.len()),
        });
        match read {
            Ok(m) => got.extend(m),
            Err(end) => {
                let _ = ws.flush().await;
                return (got, end);
            }
        }
        ws.flush().await.unwrap();
    }
}

#[tokio::test]
async fn frames_cut_anywhere_and_frames_behind_a_message_are_all_read() {
    let (ws, mut client) = pair(1 << 20).await;
    let server = tokio::spawn(serve(ws));
    let mut bytes = client_frame(false, OP_TEXT, b"hel");
    bytes.extend(client_frame(true, OP_CONTINUATION, b"lo"));
    bytes.extend(client_frame(true, OP_PING, b"p"));
    bytes.extend(client_frame(true, OP_TEXT, b"a"));
    bytes.extend(client_frame(true, OP_BINARY, &[0u8; 70_000]));
    bytes.extend(client_frame(true, OP_TEXT, b"b"));
    bytes.extend(client_frame(true, OP_CLOSE, &1000u16.to_be_bytes()));
    // Cut into pieces of 1 to 7 bytes with pauses, then the rest (a large frame) at once.
    let (small, rest) = bytes.split_at(40);
    for piece in small.chunks(3) {
        client.write_all(piece).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    client.write_all(rest).await.unwrap();
    let (got, end) = server.await.unwrap();
    assert_eq!(got, ["text hello", "text a", "binary 70000", "text b"]);
    assert!(matches!(end, ReadEnd::Closed), "{end:?}");
    // The pong, then the close echoed with the peer's code.
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await.unwrap();
    assert_eq!(answer, [&[0x8A, 1, b'p'][..], &[0x88, 2, 0x03, 0xE8]].concat());
}

#[tokio::test]
async fn a_bad_frame_ends_reading_with_its_code_and_no_buffer_is_kept_while_idle() {
    let (mut ws, mut client) = pair(1024).await;
    client.write_all(&client_frame(true, OP_TEXT, b"{}")[..3]).await.unwrap();
    std::future::poll_fn(|cx| ws.poll_readable(cx)).await.unwrap();
    assert!(ws.read(|_| ()).unwrap().is_none());
    assert!(ws.held.is_some(), "an incomplete frame is kept");
    client.write_all(&client_frame(true, OP_TEXT, b"{}")[3..]).await.unwrap();
    std::future::poll_fn(|cx| ws.poll_readable(cx)).await.unwrap();
    assert_eq!(ws.read(|m| matches!(m, Message::Text("{}"))).unwrap(), Some(true));
    assert!(ws.held.is_none() && ws.out.is_none(), "nothing kept once the frame is read");
    client.write_all(&client_frame(true, OP_TEXT, &[b'a'; 2000])[..8]).await.unwrap();
    let end = loop {
        std::future::poll_fn(|cx| ws.poll_readable(cx)).await.unwrap();
        if let Err(end) = ws.read(|_| ()) {
            break end;
        }
    };
    assert!(matches!(end, ReadEnd::Fail(Fail { code: frame::TOO_BIG, .. })), "{end:?}");
}

#[tokio::test]
async fn what_a_full_socket_does_not_take_from_try_send_is_flushed_after_it_in_order() {
    let (mut ws, mut client) = pair(1024).await;
    let small = vec![b"a".to_vec(), b"bc".to_vec()];
    assert_eq!(ws.try_send(OP_TEXT, &small).unwrap(), Sent::All);
    assert!(!ws.has_output(), "a socket with room took everything");
    // 10 MB in 100 frames (two writevs' worth), while the peer reads nothing: more than loopback takes.
    let big: Vec<Vec<u8>> = (0..100u8).map(|i| vec![i; 100_000]).collect();
    assert_eq!(ws.try_send(OP_TEXT, &big).unwrap(), Sent::Rest);
    assert!(ws.has_output());
    let reader = tokio::spawn(async move {
        let mut all = Vec::new();
        client.read_to_end(&mut all).await.unwrap();
        all
    });
    ws.flush().await.unwrap();
    drop(ws);
    let mut want = Vec::new();
    for p in small.iter().chain(&big) {
        push_frame(&mut want, OP_TEXT, p);
    }
    assert!(reader.await.unwrap() == want, "every frame, once, in order");
}

#[test]
fn accept_key_is_the_rfc_example() {
    let mut h = HeaderMap::new();
    h.insert(header::CONNECTION, "keep-alive, Upgrade".parse().unwrap());
    h.insert(header::UPGRADE, "websocket".parse().unwrap());
    h.insert(header::SEC_WEBSOCKET_VERSION, "13".parse().unwrap());
    h.insert(header::SEC_WEBSOCKET_KEY, "dGhlIHNhbXBsZSBub25jZQ==".parse().unwrap());
    assert_eq!(accept_key(&h).unwrap(), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    h.insert(header::SEC_WEBSOCKET_VERSION, "8".parse().unwrap());
    assert_eq!(accept_key(&h).unwrap_err().0, StatusCode::BAD_REQUEST);
}
