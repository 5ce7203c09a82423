//! The README's TypeScript examples type-check against the SDK: every ```ts block of README.md compiles,
//! as its own module, against src/ (imported as `@herald/client`, as an app does), with strict settings.
//!
//! Owns: that check, and the declarations of what the examples leave to the reader (a connected
//! `client`, a `general` chat handle, the app's `render`, ...). Does not own: running the examples (the
//! integration and pack tests chat through a real herald) or examples/ (examples.test.ts).
//!
//! Why type-check rather than grep: a reply's shape is what goes wrong in prose (`pins()` shown as an
//! array when it answers `{ pins }`), and plain JavaScript only finds out at run time (`.map is not a
//! function`). So the README destructures each reply as the code answers it, and this test holds it to
//! the types; a comment shown as a value is not checked, so examples show shapes in code.

import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const SDK = fileURLToPath(new URL('../../', import.meta.url));
const README = `${SDK}README.md`;
/** Virtual files live beside the README, so that `node:` imports resolve through its node_modules. */
const VIRTUAL = `${SDK}readme-examples/`;

/**
 * What the examples take as given. Typed as precisely as the examples use them, so that a reply passed
 * on in the wrong shape (an array for an object, a count for a list) fails too.
 */
const PRELUDE = `
import type { Chat, ChatEvent, HeraldClient, InboxItem, Message, MessageList, PresenceChange, ChatProfile } from '@herald/client';
declare global {
  const client: HeraldClient;
  const general: Chat;
  const assistant: Chat;
  const list: MessageList;
  const seq: number;
  const lastStoredSeq: number;
  const lastReplySeq: number;
  const newId: string;
  const png: Uint8Array;
  const pngBuffer: Uint8Array;
  const input: HTMLInputElement;
  // prompt is left to the DOM's global of that name: any value will do.
  const model: { generate(prompt: unknown): AsyncIterable<string> };
  function getToken(): Promise<string>;
  function render(what: ChatEvent | readonly Message[]): void;
  function renderOlder(ev: ChatEvent | { seq: number; type: string }): void;
  function redraw(message: Message): void;
  function drawHeader(profile: ChatProfile): void;
  function drawChatList(items: readonly InboxItem[]): void;
  function showTyping(users: readonly string[]): void;
  function showPresent(count: PresenceChange['count'], users: readonly string[]): void;
  function showProgress(fraction: number): void;
  function showImage(url: string, name: string): void;
  function showDownloadLink(url: string, name: string, size: number): void;
  function showTooLong(): void;
  function show(chat: string, seq: number, user: string | undefined, body: unknown): void;
  function api(method: string, path: string, body: unknown): Promise<any>;
}
export {};
`;

interface Block {
  /** The README line of the block's first line of code. */
  line: number;
  code: string;
}

/** The ```ts blocks of `markdown`, each with where it starts. */
function tsBlocks(markdown: string): Block[] {
  const blocks: Block[] = [];
  const lines = markdown.split('\n');
  for (let i = 0; i < lines.length; i++) {
    if (lines[i]!.trim() !== '```ts') continue;
    const start = i + 1;
    let end = start;
    while (end < lines.length && lines[end]!.trim() !== '```') end++;
    blocks.push({ line: start + 1, code: lines.slice(start, end).join('\n') });
    i = end;
  }
  return blocks;
}

/** The diagnostics of compiling `blocks`, each as "README.md:<line>: <message>". */
function check(blocks: Block[]): string[] {
  const files = new Map<string, string>([[`${VIRTUAL}prelude.d.ts`, PRELUDE]]);
  // `export {}` makes each block a module: its own scope, and top-level await allowed.
  blocks.forEach((b, n) => files.set(`${VIRTUAL}block-${n}.ts`, `${b.code}\nexport {};\n`));
  const options: ts.CompilerOptions = {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    lib: ['lib.es2022.d.ts', 'lib.dom.d.ts', 'lib.dom.iterable.d.ts'],
    types: ['node'],
    typeRoots: [`${SDK}node_modules/@types`],
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    baseUrl: SDK,
    paths: { '@herald/client': ['src/index.ts'] },
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, version, ...rest) => {
    const text = files.get(name);
    return text !== undefined ? ts.createSourceFile(name, text, version) : getSourceFile(name, version, ...rest);
  };
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => files.has(name) || fileExists(name);
  const readFile = host.readFile.bind(host);
  host.readFile = (name) => files.get(name) ?? readFile(name);
  const program = ts.createProgram([...files.keys()], options, host);
  const out: string[] = [];
  for (const d of ts.getPreEmitDiagnostics(program)) {
    const text = ts.flattenDiagnosticMessageText(d.messageText, '\n');
    const m = d.file === undefined ? null : /block-(\d+)\.ts$/.exec(d.file.fileName);
    if (m === null || d.start === undefined) {
      out.push(`${d.file?.fileName ?? '(no file)'}: ${text}`);
      continue;
    }
    const { line } = d.file!.getLineAndCharacterOfPosition(d.start);
    out.push(`README.md:${blocks[Number(m[1])]!.line + line}: ${text}`);
  }
  return out;
}

describe('README.md', () => {
  const blocks = tsBlocks(readFileSync(README, 'utf8'));

  it('has TypeScript examples to check', () => {
    expect(blocks.length).toBeGreaterThan(10);
  });

  // One program for all blocks: the SDK's sources are checked once, which takes seconds.
  it('type-checks every ```ts example against the SDK', { timeout: 60_000 }, () => {
    expect(check(blocks)).toEqual([]);
  });

  it('fails an example that takes a reply for an array it is not', { timeout: 60_000 }, () => {
    const wrong = [
      { line: 1, code: 'const pins = await general.pins();\nconsole.log(pins.map((p: unknown) => p));' },
      { line: 3, code: 'for (const t of await client.threads()) console.log(t);' },
    ];
    const errors = check(wrong);
    expect(errors).toHaveLength(2);
    expect(errors[0]).toMatch(/^README\.md:2: Property 'map' does not exist on type 'PinsOk'/);
    expect(errors[1]).toMatch(/^README\.md:3: Type 'ThreadsOk' must have a '\[Symbol\.iterator\]\(\)' method/);
  });
});
