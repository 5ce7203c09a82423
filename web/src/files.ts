//! A message's files as drawn: images inline as `<img>` (loaded straight from the file's URL), every
//! other file as a download link with its name and size.
//!
//! Owns: which types show inline, sizes in words, and building those elements from the event's `files`
//! with DOM calls only (a file's name is user data: it is only ever text). Does not own: uploading
//! (attachments.ts) or where a message's files go in its row (row.ts).
//!
//! Element hooks (the end-to-end test relies on them):
//!   .files > a.file-image[data-file-id] > img   an image shown inline (alt: its name)
//!   .files > a.file-link[data-file-id]          any other file: its name and size, a download

import type { FileInfo } from '../../sdk/ts/src/index.ts';

/**
 * The types shown inline. Raster images only: herald serves every other type (SVG included) as an
 * attachment, and an `<img>` of one would show a broken image.
 */
export const INLINE_IMAGE_TYPES: ReadonlySet<string> = new Set(['image/png', 'image/jpeg', 'image/gif', 'image/webp']);

/** `size` bytes in a person's words: 812 B, 12.4 KB, 3.1 MB. */
export function sizeText(size: number): string {
  if (size < 1024) return `${size} B`;
  if (size < 1024 * 1024) return `${(size / 1024).toFixed(1)} KB`;
  return `${(size / (1024 * 1024)).toFixed(1)} MB`;
}

/** True for an http(s) URL, the only kind a file's link or image may point at. */
function safeUrl(url: string): boolean {
  try {
    const u = new URL(url, location.href);
    return u.protocol === 'http:' || u.protocol === 'https:';
  } catch {
    return false;
  }
}

/** A key that changes when the files or their URLs do, so a row redraws images only then. */
export function filesKey(files: readonly FileInfo[] | undefined): string {
  return (files ?? []).map((f) => `${f.id} ${f.url}`).join('\n');
}

/**
 * Fills `el` with `files`: images inline, other files as links; empty (and hidden) when none.
 * `loaded` runs when an image has loaded, and so made its row taller.
 */
export function drawFiles(el: HTMLElement, files: readonly FileInfo[] | undefined, loaded: () => void): void {
  const items = (files ?? []).filter((f) => safeUrl(f.url)).map((f) => fileElement(f, loaded));
  el.replaceChildren(...items);
  el.hidden = items.length === 0;
}

function fileElement(f: FileInfo, loaded: () => void): HTMLElement {
  const a = document.createElement('a');
  a.href = f.url;
  a.dataset.fileId = f.id;
  a.title = `${f.name} (${sizeText(f.size)})`;
  if (INLINE_IMAGE_TYPES.has(f.type.split(';')[0]!.trim().toLowerCase())) {
    a.className = 'file-image';
    a.target = '_blank';
    a.rel = 'noopener';
    const img = document.createElement('img');
    // Not lazy: the chat is a scrolled box, where a lazy image loads only once scrolled to.
    img.addEventListener('load', loaded, { once: true });
    img.src = f.url;
    img.alt = f.name;
    a.append(img);
    return a;
  }
  a.className = 'file-link';
  a.download = f.name; // same-origin URLs save under this name; herald sends others as attachments anyway
  const name = document.createElement('span');
  name.className = 'file-name';
  name.textContent = f.name;
  const size = document.createElement('span');
  size.className = 'file-size';
  size.textContent = sizeText(f.size);
  a.append(name, size);
  return a;
}
