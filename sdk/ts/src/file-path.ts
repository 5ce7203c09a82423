//! A file on disk as an upload source, for Node: its size from `stat`, its bytes from a read stream, its
//! name from the path.
//!
//! Owns: reading a path for `Chat.uploadPath`. Does not own: the upload (files.ts, chat.ts).
//!
//! Why `node:fs` is imported when called, by a name held in a variable: this package runs in browsers
//! too, and bundlers (esbuild, Vite, webpack, Rollup) leave an `import()` whose argument is not a string
//! literal alone instead of failing to find `node:fs` for a browser build. Only Node ever calls it.

/** The specifier of Node's file system module, in a variable on purpose (see above). */
const NODE_FS = 'node:fs';

/** The part of `node:fs` used here (the package's types do not depend on Node's). */
interface NodeFs {
  promises: { stat(path: string): Promise<{ size: number; isFile(): boolean }> };
  createReadStream(path: string, opts: { start: number; end: number }): AsyncIterable<Uint8Array>;
}

/** The last part of `path`, on either separator. */
export function baseName(path: string): string {
  const parts = path.split(/[\\/]/);
  return parts[parts.length - 1] ?? path;
}

/**
 * `path` opened for an upload: exactly its size at `stat` time in bytes (a file that grows meanwhile is
 * read up to that size; one that shrinks fails the upload), and its base name.
 */
export async function openPath(path: string): Promise<{ stream: AsyncIterable<Uint8Array>; size: number; name: string }> {
  let fs: NodeFs;
  try {
    fs = (await import(/* @vite-ignore */ /* webpackIgnore: true */ NODE_FS)) as NodeFs;
  } catch (err) {
    throw new TypeError(`herald: uploadPath needs Node's fs (in a browser, upload a File): ${String(err)}`);
  }
  const st = await fs.promises.stat(path);
  if (!st.isFile()) throw new TypeError(`herald: uploadPath: ${path} is not a file`);
  // createReadStream's `end` is inclusive; a file of 0 bytes is read as nothing at all.
  const stream = st.size === 0 ? empty() : fs.createReadStream(path, { start: 0, end: st.size - 1 });
  return { stream, size: st.size, name: baseName(path) };
}

async function* empty(): AsyncGenerator<Uint8Array> {
  // nothing to read
}
