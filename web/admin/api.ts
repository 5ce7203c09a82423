//! How the admin page calls herald: every route with the api key, the server's own error message on a
//! refusal, and a refused key told apart (it sends the user back to the sign-in).
//!
//! Owns: the request and the error it throws. Does not own: the key's keeping (admin.ts) or what a page
//! does with an answer (admin.ts, support.ts).

/** A refusal of the key, told apart from every other failure: it sends the user back to the login. */
export class Refused extends Error {}

/** The HTTP methods the admin page uses. */
export type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';

/** A failed answer as an Error: the server's `code: message`, else the status line. */
async function failure(res: Response): Promise<Error> {
  if (res.status === 401) return new Refused('the api key was refused');
  let message = `${res.status} ${res.statusText}`;
  try {
    const err = (await res.json()) as { error?: { code?: string; message?: string } };
    if (err.error?.message !== undefined) message = `${err.error.code}: ${err.error.message}`;
  } catch {
    // Not JSON (a proxy's page, say): the status line says enough.
  }
  return new Error(message);
}

/** Calls a route with the key; the raw answer when it succeeded, or throws with the server's own message. */
export async function request(key: string, method: Method, path: string, body?: unknown): Promise<Response> {
  const res = await fetch(path, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
  });
  if (!res.ok) throw await failure(res);
  return res;
}

/** Calls a route with the key; the parsed answer, or throws with the server's own message. */
export async function call<T>(key: string, method: Method, path: string, body?: unknown): Promise<T> {
  return (await (await request(key, method, path, body)).json()) as T;
}
