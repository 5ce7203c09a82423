//! Files picked for the next message: the Attach button's file picker and files dropped on the chat,
//! each uploaded at once through the SDK (`chat.upload`) and shown as a chip above the message box
//! (uploading with its progress, then its size, or why it failed; ✕ takes it off), until the next send
//! takes the ids of those uploaded.
//!
//! Owns: the chips, the picker and the drop zone's handlers (set as properties, so a new session's
//! replace the old one's). Does not own: the upload (the SDK's, given by demo.ts) or the send.
//!
//! Element hooks (the end-to-end test relies on them):
//!   #file-input                               the picker's <input type=file multiple>
//!   #attachments > li[data-name][data-state]  one per file: uploading, ready or failed

import { sizeText } from './files.ts';

/** The most files a message may carry (docs/protocol.md, "Files"). */
export const MAX_FILES = 10;

/** The elements attachments live in. */
export interface AttachmentElements {
  list: HTMLElement;
  input: HTMLInputElement;
  button: HTMLButtonElement;
  /** Where files may be dropped: the chat. */
  dropZone: HTMLElement;
}

/** Uploads `file`, reporting progress; resolves with its id. */
export type UploadFn = (file: File, onProgress: (sent: number, total: number) => void) => Promise<{ id: string }>;

interface Item {
  li: HTMLLIElement;
  /** Resolves with the file id, or null when the upload failed or the chip was taken off. */
  done: Promise<string | null>;
  removed: boolean;
}

/** The files waiting for the next message of one session. */
export class Attachments {
  private items: Item[] = [];

  constructor(
    private readonly els: AttachmentElements,
    private readonly upload: UploadFn,
    private readonly notice: (text: string) => void,
  ) {
    els.list.replaceChildren();
    els.list.hidden = true;
    els.button.disabled = false;
    els.button.onclick = () => els.input.click();
    els.input.value = '';
    els.input.onchange = () => {
      this.add([...(els.input.files ?? [])]);
      els.input.value = ''; // picking the same file again is a new change
    };
    const zone = els.dropZone;
    zone.ondragover = (e) => {
      if (!e.dataTransfer?.types.includes('Files')) return;
      e.preventDefault(); // allows the drop
      e.dataTransfer.dropEffect = 'copy';
      zone.classList.add('dropping');
    };
    zone.ondragleave = (e) => {
      if (e.relatedTarget === null || !zone.contains(e.relatedTarget as Node)) zone.classList.remove('dropping');
    };
    zone.ondrop = (e) => {
      zone.classList.remove('dropping');
      const files = [...(e.dataTransfer?.files ?? [])];
      if (files.length === 0) return;
      e.preventDefault(); // the browser would otherwise open the file in place of the page
      this.add(files);
    };
  }

  /** How many files will go with the next message (uploading or ready). */
  get count(): number {
    return this.items.length;
  }

  /** Starts uploading `files`, each as a chip; beyond MAX_FILES for one message, says so. */
  add(files: File[]): void {
    const room = MAX_FILES - this.items.length;
    if (files.length > room) this.notice(`a message carries at most ${MAX_FILES} files`);
    for (const file of files.slice(0, Math.max(0, room))) this.items.push(this.start(file));
    this.els.list.hidden = this.items.length === 0;
  }

  /**
   * The chips' files for a send: waits for their uploads, empties the list, and resolves with the ids
   * of those uploaded (a failed one was already told in the notice).
   */
  async take(): Promise<string[]> {
    const items = this.items;
    this.items = [];
    this.els.list.hidden = true;
    for (const item of items) item.li.remove();
    const ids = await Promise.all(items.map((i) => (i.removed ? null : i.done)));
    return ids.filter((id): id is string => id !== null);
  }

  private start(file: File): Item {
    const li = document.createElement('li');
    li.dataset.name = file.name;
    li.dataset.state = 'uploading';
    const name = document.createElement('span');
    name.className = 'name';
    name.textContent = file.name;
    const status = document.createElement('span');
    status.className = 'status';
    status.textContent = 'uploading…';
    const remove = document.createElement('button');
    remove.type = 'button';
    remove.className = 'link';
    remove.textContent = '✕';
    remove.setAttribute('aria-label', `remove ${file.name}`);
    li.append(name, status, remove);
    this.els.list.append(li);
    const item: Item = { li, removed: false, done: Promise.resolve(null) };
    remove.onclick = () => {
      // Never attached, the upload is deleted by herald within a day.
      item.removed = true;
      this.items = this.items.filter((i) => i !== item);
      li.remove();
      this.els.list.hidden = this.items.length === 0;
    };
    item.done = this.upload(file, (sent, total) => {
      if (total > 0 && sent < total) status.textContent = `uploading… ${Math.floor((sent / total) * 100)}%`;
    }).then(
      ({ id }) => {
        li.dataset.state = 'ready';
        status.textContent = sizeText(file.size);
        return id;
      },
      (e: unknown) => {
        li.dataset.state = 'failed';
        status.textContent = 'failed';
        this.notice(`upload of ${file.name} failed: ${e instanceof Error ? e.message : String(e)}`);
        return null;
      },
    );
    return item;
  }
}
