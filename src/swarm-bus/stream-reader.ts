/**
 * Reading stored messages with `$JS.API.STREAM.MSG.GET.<stream>`: the one
 * read a scoped member's grant allows on its streams (it has no direct get
 * and may create no consumer). Reads by sequence, last message of a
 * subject, and next message of a filter at or after a sequence (the
 * server's `next_by_subj`, which nats-server 2.9.10 answers, wildcards
 * included).
 */
import type { JetStreamManager, MsgRequest, StoredMsg } from "@nats-io/jetstream";
import { busFailure, jetStreamCode } from "./errors.js";

const NO_MESSAGE = 10037;

/** The last message stored on `subject`, or null. */
export async function lastMessage(jsm: JetStreamManager, stream: string, subject: string): Promise<StoredMsg | null> {
  try {
    return await jsm.streams.getMessage(stream, { last_by_subj: subject });
  } catch (error) {
    throw busFailure(error, "reading a stored message");
  }
}

/** The first message matching `filter` at or after `fromSeq`, or null. */
export async function nextMessage(jsm: JetStreamManager, stream: string, filter: string, fromSeq: number): Promise<StoredMsg | null> {
  try {
    // The client's MsgRequest type omits next_by_subj, which the server accepts on MSG.GET.
    return await jsm.streams.getMessage(stream, { seq: fromSeq, next_by_subj: filter } as unknown as MsgRequest);
  } catch (error) {
    throw busFailure(error, "reading a stored message");
  }
}

/** The message at `seq`, or null when it does not exist (deleted, or out of range). */
export async function messageAt(jsm: JetStreamManager, stream: string, seq: number): Promise<StoredMsg | null> {
  try {
    return await jsm.streams.getMessage(stream, { seq });
  } catch (error) {
    if (jetStreamCode(error) === NO_MESSAGE) return null;
    throw busFailure(error, "reading a stored message");
  }
}

/**
 * Up to `limit` messages matching any of `filters` from `fromSeq`, in
 * sequence order, skipping those `skip` rejects (reserved mark subjects).
 */
export async function readMessages(
  jsm: JetStreamManager,
  stream: string,
  filters: readonly string[],
  fromSeq: number,
  limit: number,
  skip: (subject: string) => boolean = () => false,
): Promise<StoredMsg[]> {
  const heads = new Map<string, StoredMsg | null>();
  const advance = async (filter: string, seq: number) => {
    let next = await nextMessage(jsm, stream, filter, seq);
    while (next !== null && skip(next.subject)) next = await nextMessage(jsm, stream, filter, next.seq + 1);
    heads.set(filter, next);
  };
  await Promise.all(filters.map((f) => advance(f, Math.max(1, fromSeq))));
  const out: StoredMsg[] = [];
  while (out.length < limit) {
    let best: [string, StoredMsg] | undefined;
    for (const [filter, head] of heads) {
      if (head !== null && (best === undefined || head.seq < best[1].seq)) best = [filter, head];
    }
    if (best === undefined) break;
    out.push(best[1]);
    // Filters may overlap: advance every head that returned this message.
    await Promise.all([...heads].filter(([, head]) => head?.seq === best[1].seq).map(([filter]) => advance(filter, best[1].seq + 1)));
  }
  return out;
}

/** Every message matching `filter` with a sequence in [fromSeq, toSeq], in order. */
export async function allMessages(jsm: JetStreamManager, stream: string, filter: string, fromSeq: number, toSeq: number): Promise<StoredMsg[]> {
  const out: StoredMsg[] = [];
  let seq = Math.max(1, fromSeq);
  while (seq <= toSeq) {
    const next = await nextMessage(jsm, stream, filter, seq);
    if (next === null || next.seq > toSeq) break;
    out.push(next);
    seq = next.seq + 1;
  }
  return out;
}

/**
 * Visits every stored message with a sequence in [fromSeq, toSeq] (gaps
 * skipped), `concurrency` reads in flight, in sequence order.
 */
export async function scanBySequence(
  jsm: JetStreamManager,
  stream: string,
  fromSeq: number,
  toSeq: number,
  visit: (message: StoredMsg) => void,
  concurrency = 64,
): Promise<void> {
  for (let start = Math.max(1, fromSeq); start <= toSeq; start += concurrency) {
    const end = Math.min(toSeq, start + concurrency - 1);
    const window = await Promise.all(Array.from({ length: end - start + 1 }, (_, i) => messageAt(jsm, stream, start + i)));
    for (const message of window) if (message !== null) visit(message);
  }
}
