//! What the demo page needs from herald in development mode and from the browser to start a session:
//! a development token, the WebSocket endpoint on the page's own host, and client ids for sends.
//!
//! Owns: those three. Does not own: the session (demo.ts).

/** Asks herald for a development token; only loopback clients of a server without secrets get one. */
export async function devToken(workspace: string, user: string): Promise<string> {
  const res = await fetch('/v1/dev/token', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ workspace, user }),
  });
  if (!res.ok) throw new Error(`dev token refused: HTTP ${res.status} ${await res.text()}`);
  const { token } = (await res.json()) as { token?: unknown };
  if (typeof token !== 'string') throw new Error('dev token: the answer has no token');
  return token;
}

/** The WebSocket endpoint on the host that served this page. */
export function wsUrl(): string {
  return `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/v1/ws`;
}

/** A client_id for a send; `crypto.randomUUID` exists only in secure contexts (loopback is one). */
export function newClientId(): string {
  if (typeof crypto.randomUUID === 'function') return `demo-${crypto.randomUUID()}`;
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return `demo-${Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('')}`;
}
