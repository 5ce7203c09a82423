//! A minimal typed event emitter shared by the client and chat handles.
//!
//! Owns: listener bookkeeping and dispatch. Does not own: which events exist (each class declares its
//! own map of event name to payload type).

/** A listener for one event. */
export type Listener<T> = (payload: T) => void;

/**
 * Dispatches typed events. `E` maps each event name to its payload type, e.g.
 * `{ state: StateChange; error: HeraldError }`; one payload per event keeps listeners easy to type, and
 * a map without an index signature makes a misspelt event name a compile error.
 *
 * A listener that throws does not stop the others or corrupt the client's state machine: the error is
 * rethrown on a fresh microtask, the way DOM `EventTarget` reports it.
 */
export class Emitter<E extends object> {
  private readonly listeners = new Map<keyof E, Set<Listener<never>>>();

  /** Adds a listener; returns a function that removes it. */
  on<K extends keyof E>(name: K, fn: Listener<E[K]>): () => void {
    let set = this.listeners.get(name);
    if (set === undefined) {
      set = new Set();
      this.listeners.set(name, set);
    }
    set.add(fn as Listener<never>);
    return () => this.off(name, fn);
  }

  /** Adds a listener that runs at most once. */
  once<K extends keyof E>(name: K, fn: Listener<E[K]>): () => void {
    const off = this.on(name, (payload) => {
      off();
      fn(payload);
    });
    return off;
  }

  /** Removes a listener added with `on`. */
  off<K extends keyof E>(name: K, fn: Listener<E[K]>): void {
    const set = this.listeners.get(name);
    if (set === undefined) return;
    set.delete(fn as Listener<never>);
    // Drop empty sets so a long-lived handle's map does not only ever grow.
    if (set.size === 0) this.listeners.delete(name);
  }

  /** Removes every listener. */
  removeAllListeners(): void {
    this.listeners.clear();
  }

  /** Calls every listener of `name` with `payload`. */
  protected emit<K extends keyof E>(name: K, payload: E[K]): void {
    const set = this.listeners.get(name);
    if (set === undefined) return;
    // Copy: a listener may remove itself (once) or others while we iterate.
    for (const fn of [...set]) {
      try {
        (fn as Listener<E[K]>)(payload);
      } catch (err) {
        queueMicrotask(() => {
          throw err;
        });
      }
    }
  }

  /** How many listeners `name` has; lets callers skip building a payload nobody reads. */
  protected listenerCount<K extends keyof E>(name: K): number {
    return this.listeners.get(name)?.size ?? 0;
  }
}
