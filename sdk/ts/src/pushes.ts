//! Where a server push goes: to the chat handle it names, or to the inbox.
//!
//! Owns: the checks that a push carries what its handler needs, and handing it over. Pushes, event
//! types and fields this version does not know are ignored (the rule from protocol 1.1 on).
//! Does not own: what a push does to its receiver (chat.ts, inbox.ts), nor the `reconnect` push, which
//! is about the link (connection.ts).

import type { Chat } from './chat.js';
import { HeraldError } from './errors.js';
import type { Inbox } from './inbox.js';
import type { PushFrame } from './types.js';

/** Where pushes can go. */
export interface PushTargets {
  /** The handle of a chat, if the application ever asked for one; a push for another is dropped. */
  chat(id: string): Chat | undefined;
  readonly inbox: Inbox;
  /** A push the client cannot read. */
  error(err: HeraldError): void;
}

/** A seq, a count or a delay as the protocol sends them: a non-negative integer. */
export function isSeq(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}

/** Hands `push` to its receiver. */
export function routePush(push: PushFrame, to: PushTargets): void {
  switch (push.ev) {
    case 'event':
    case 'notify': {
      if (typeof push.chat !== 'string' || !isSeq(push.seq) || push.seq === 0) {
        to.error(new HeraldError('protocol', `herald: a ${push.ev} push without a chat or seq`));
        return;
      }
      const chat = to.chat(push.chat);
      if (chat === undefined) return;
      if (push.ev === 'event') chat.onEventPush(push);
      else chat.onNotify(push);
      return;
    }
    case 'typing': {
      if (typeof push.chat !== 'string' || typeof push.user !== 'string') return;
      to.chat(push.chat)?.onTypingPush(push.user);
      return;
    }
    case 'presence': {
      if (typeof push.chat !== 'string') return;
      to.chat(push.chat)?.onPresencePush(push);
      return;
    }
    case 'inbox':
      to.inbox.onPush(push);
      return;
    case 'append': {
      if (typeof push.chat !== 'string' || !isSeq(push.target) || typeof push.text !== 'string' || !isSeq(push.at)) return;
      to.chat(push.chat)?.onAppendPush(push);
      return;
    }
    default:
      return; // a push this version does not know (or `reconnect`, the connection's): ignore
  }
}
