// The Socket.IO v4 peer of herald-bench: one Node process, WebSocket transport only,
// no storage or auth. Events: "join" (room, user?, ack) puts the socket in a room (and
// with a user, counts it in the room's in-memory member set); "pub"
// (room, payload) emits "msg" with the payload to everyone in the room; clients
// that are not in the room (the publishers) do not get it. Settings kept at Socket.IO's
// defaults except: websocket only (herald has no long-polling), no per-message deflate
// (herald does not compress), and 1 MB max message (herald's bench frames are small).
// Prints "listening on 127.0.0.1:PORT" once it listens.
// With HERALD_BENCH_REDIS=redis://127.0.0.1:PORT in the environment, nodes share rooms through
// @socket.io/redis-adapter (pub/sub on that Redis): the cross-node peer of herald's NATS broker.
// With HERALD_BENCH_SIO_NATS=nats://127.0.0.1:PORT instead, through @mickl/socket.io-nats-adapter.
// The cell's event (herald-bench cell --peer socketio): "cell" (kind, chat, payload, ack?), where
// a chat's watchers are in room "w:CHAT" and its members in "m:CHAT". kind "typing" goes to the
// other watchers (socket.to: not the typist, as herald's typing); "msg", "read" and "react" go to
// every watcher (io.to: the sender's own connection too, as herald's events) and mark the chat's
// members' inboxes: one "inbox" [chat] to "m:CHAT" at most every INBOX_EVERY_MS per chat from this
// node (herald coalesces live-inbox pushes to one per chat per 250 ms per connection).
const { Server } = require("socket.io");
const http = require("http");

const port = Number(process.argv[2] || 0);
const httpServer = http.createServer();
const io = new Server(httpServer, {
  transports: ["websocket"],
  perMessageDeflate: false,
  httpCompression: false,
  maxHttpBufferSize: 1e6,
  serveClient: false,
});
// room -> Set of member user ids (joinflood's members; not durable, gone with the process).
const members = new Map();
const INBOX_EVERY_MS = 250;
// Chats whose inbox push is scheduled on this node (each leaves when its timer fires).
const inboxDue = new Set();
function markInbox(chat) {
  if (inboxDue.has(chat)) return;
  inboxDue.add(chat);
  setTimeout(() => {
    inboxDue.delete(chat);
    io.to("m:" + chat).emit("inbox", chat);
  }, INBOX_EVERY_MS);
}
io.on("connection", (socket) => {
  // ["join", room] or ["join", room, user]: with a user, the room's member set (in memory,
  // kept after the socket leaves, as a chat's members are) counts it, and the ack carries the count.
  socket.on("join", (room, ...rest) => {
    const ack = typeof rest[rest.length - 1] === "function" ? rest.pop() : null;
    room = String(room);
    socket.join(room);
    let count = true;
    if (rest.length > 0) {
      let set = members.get(room);
      if (!set) members.set(room, (set = new Set()));
      set.add(String(rest[0]));
      count = set.size;
    }
    if (ack) ack(count);
  });
  socket.on("pub", (room, payload, ack) => {
    io.to(String(room)).emit("msg", payload);
    if (typeof ack === "function") ack(true);
  });
  socket.on("cell", (kind, chat, payload, ack) => {
    kind = String(kind);
    chat = String(chat);
    if (kind === "typing") {
      socket.to("w:" + chat).emit("typing", payload);
    } else if (kind === "msg" || kind === "read" || kind === "react") {
      io.to("w:" + chat).emit(kind, payload);
      markInbox(chat);
    }
    if (typeof ack === "function") ack(true);
  });
});
async function adapter() {
  const natsUrl = process.env.HERALD_BENCH_SIO_NATS;
  if (natsUrl) {
    const { connect } = require("nats");
    const { createAdapter } = require("@mickl/socket.io-nats-adapter");
    const nc = await connect({ servers: natsUrl.replace(/^nats:\/\//, "") });
    io.adapter(createAdapter(nc));
    return;
  }
  const url = process.env.HERALD_BENCH_REDIS;
  if (!url) return;
  const { createAdapter } = require("@socket.io/redis-adapter");
  const { createClient } = require("redis");
  const pub = createClient({ url });
  const sub = pub.duplicate();
  await Promise.all([pub.connect(), sub.connect()]);
  io.adapter(createAdapter(pub, sub));
}
adapter().then(() => {
  httpServer.listen(port, "127.0.0.1", () => {
    console.log(`listening on 127.0.0.1:${httpServer.address().port}`);
  });
}, (e) => { console.error("redis adapter:", e); process.exit(1); });
const stop = () => { io.close(); process.exit(0); };
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
