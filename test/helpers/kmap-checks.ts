/**
 * Shared checks for the Kmap command lane's fault tests: a small model of
 * the commands a test submits (with the outcome each must end with), and
 * the invariants every scenario must leave behind, verified through the
 * generated clients only:
 *
 * - every submitted command has exactly one record, in submission order,
 *   terminal (COMMITTED or FAILED) with the outcome the model predicts;
 * - in the change log from position 0 each command has exactly one
 *   terminal event, its events follow the lifecycle, and the number of
 *   APPLYING events is its attempt count;
 * - Kweb history holds exactly one transaction per committed command (its
 *   provenance the idempotency id, its id the record's transaction id) and
 *   none for failed ones, in submission order, each verifying with the
 *   served public key, chained by previous_digest.
 *
 * The model predicts outcomes from submission order alone: an update that
 * quotes a node's transaction id commits only when no command submitted
 * before it (and predicted to commit) touched that node since. Transaction
 * and node ids are random, so the model only quotes ids it has observed in
 * committed records.
 */
import { createHash, randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import Database from "better-sqlite3";
import { create, equals, type MessageInitShape } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import { CommandSchema, CommandState, type CommandRecord } from "../../gen/laneway/kmap/v1/command_pb.js";
import {
  CommandEventKind,
  KmapCommandService,
  SubmitCommandRequestSchema,
  type SubmitCommandRequest,
  type SubmitCommandResponse,
  type WatchCommandsResponse,
} from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { KmapReadService, type Transaction } from "../../gen/laneway/kmap/v1/kmap_read_service_pb.js";
import { verifyTransaction } from "../../src/client/verify-transaction.js";
import { ClientPool, spawnLaneway, type TestTokens } from "./laneway.js";
import { waitFor } from "./wait-for.js";

export interface KmapClients {
  readonly commands: Client<typeof KmapCommandService>;
  readonly read: Client<typeof KmapReadService>;
}

/** The generated Kmap clients with the operator token. */
export function kmapClients(laneway: { readonly clients: ClientPool; readonly tokens: TestTokens }): KmapClients {
  const token = laneway.tokens.admin;
  return {
    commands: laneway.clients.client(KmapCommandService, { token }),
    read: laneway.clients.client(KmapReadService, { token }),
  };
}

/** A small seeded PRNG (mulberry32), so a random run can be repeated from its seed. */
export class SeededRandom {
  #state: number;

  constructor(readonly seed: number) {
    this.#state = seed >>> 0;
  }

  /** A float in [0, 1). */
  next(): number {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** An integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error("pick from an empty list");
    return items[this.int(0, items.length - 1)]!;
  }

  /** 32 lowercase hexadecimal characters. */
  hexId(): string {
    let id = "";
    for (let i = 0; i < 4; i++) id += Math.floor(this.next() * 2 ** 32).toString(16).padStart(8, "0");
    return id;
  }
}

/** How a planned command must end. */
export type ExpectedOutcome = "committed" | "missing_node" | "stale_revision";

export interface PlannedCommand {
  readonly id: string;
  /** What the command is, for failure messages. */
  readonly label: string;
  readonly request: SubmitCommandRequest;
  readonly expected: ExpectedOutcome;
}

/**
 * Which transaction id an update quotes for a node: none, the newest one
 * the test has observed (valid unless a command submitted earlier and still
 * unapplied will change the node), or the node's creation (stale once the
 * node changed).
 */
export type Quote = "none" | "latest-observed" | "creation";

export class KmapModel {
  /** Every command, in the order it is (to be) submitted. */
  readonly planned: PlannedCommand[] = [];
  readonly #byId = new Map<string, PlannedCommand>();
  /** Node id → ids of the commands predicted to commit that touch it, oldest first (its creation first). */
  readonly #history = new Map<string, string[]>();
  /** Command id → its transaction id, once observed committed. */
  readonly #transactions = new Map<string, string>();
  #counter = 0;

  constructor(private readonly newId: () => string = () => randomBytes(16).toString("hex")) {}

  /** Nodes whose creation the test has observed. */
  get nodes(): string[] {
    return [...this.#history.keys()];
  }

  /** The last command predicted to commit that touches `nodeId` (its creation at first). */
  lastCommandTouching(nodeId: string): string {
    const history = this.#history.get(nodeId);
    if (!history) throw new Error(`the model does not know node ${nodeId}`);
    return history.at(-1)!;
  }

  get(id: string): PlannedCommand {
    const planned = this.#byId.get(id);
    if (!planned) throw new Error(`no planned command ${id}`);
    return planned;
  }

  create(label = "create"): PlannedCommand {
    const n = ++this.#counter;
    return this.#plan(label, { operation: { case: "createNode", value: { kind: "topic", title: `node ${n}`, attributes: { n: String(n) } } } }, {}, "committed");
  }

  update(nodeId: string, quote: Quote = "none", label = `update (${quote})`): PlannedCommand {
    const { expectations, stale } = this.#quote([nodeId], quote);
    const n = ++this.#counter;
    const planned = this.#plan(
      label,
      { operation: { case: "updateNode", value: { nodeId, title: `title ${n}`, setAttributes: { rev: String(n) } } } },
      expectations,
      stale ? "stale_revision" : "committed",
    );
    if (!stale) this.#touch([nodeId], planned.id);
    return planned;
  }

  /** A link with a link type never used before (so it can never be a duplicate). */
  link(fromId: string, toId: string, quote: Quote = "none", label = `link (${quote})`): PlannedCommand {
    if (fromId === toId) throw new Error("the model links distinct nodes only");
    const { expectations, stale } = this.#quote([fromId, toId], quote);
    const n = ++this.#counter;
    const planned = this.#plan(
      label,
      { operation: { case: "linkNodes", value: { fromId, toId, linkType: `rel${n}` } } },
      expectations,
      stale ? "stale_revision" : "committed",
    );
    if (!stale) this.#touch([fromId, toId], planned.id);
    return planned;
  }

  /** An update of a node that never existed: fails with missing_node. */
  updateMissing(label = "update of a missing node"): PlannedCommand {
    const n = ++this.#counter;
    return this.#plan(label, { operation: { case: "updateNode", value: { nodeId: this.newId(), title: `title ${n}` } } }, {}, "missing_node");
  }

  /** Learns transaction ids and created nodes from records (any state). */
  observe(records: Iterable<CommandRecord>): void {
    for (const record of records) {
      if (record.state !== CommandState.COMMITTED) continue;
      const id = record.submission?.idempotencyId ?? "";
      const planned = this.#byId.get(id);
      if (!planned) continue;
      this.#transactions.set(id, record.transactionId);
      if (planned.request.command?.operation.case === "createNode" && record.createdNodeId && !this.#history.has(record.createdNodeId)) {
        this.#history.set(record.createdNodeId, [id]);
      }
    }
  }

  #plan(label: string, command: MessageInitShape<typeof CommandSchema>, expectations: Record<string, string>, expected: ExpectedOutcome): PlannedCommand {
    const id = this.newId();
    const request = create(SubmitCommandRequestSchema, { idempotencyId: id, command, expectedTransactionIds: expectations });
    const planned = { id, label, request, expected };
    this.planned.push(planned);
    this.#byId.set(id, planned);
    return planned;
  }

  #quote(nodeIds: readonly string[], quote: Quote): { expectations: Record<string, string>; stale: boolean } {
    const expectations: Record<string, string> = {};
    let stale = false;
    if (quote === "none") {
      for (const nodeId of nodeIds) if (!this.#history.has(nodeId)) throw new Error(`the model does not know node ${nodeId}`);
      return { expectations, stale };
    }
    for (const nodeId of nodeIds) {
      const history = this.#history.get(nodeId);
      if (!history) throw new Error(`the model does not know node ${nodeId}`);
      const version = quote === "creation" ? history[0]! : history.findLast((id) => this.#transactions.has(id))!;
      expectations[nodeId] = this.#transactions.get(version)!;
      if (history.at(-1) !== version) stale = true;
    }
    return { expectations, stale };
  }

  #touch(nodeIds: readonly string[], commandId: string): void {
    for (const nodeId of nodeIds) this.#history.get(nodeId)!.push(commandId);
  }
}

/** Submits a planned command (optionally abortable). */
export function submitPlanned(clients: KmapClients, planned: PlannedCommand, signal?: AbortSignal): Promise<SubmitCommandResponse> {
  return clients.commands.submitCommand(planned.request, { ...(signal ? { signal } : {}), timeoutMs: 30_000 });
}

/** Every record, all pages, in submission order. */
export async function listAllRecords(commands: KmapClients["commands"], signal?: AbortSignal, pageSize = 50): Promise<CommandRecord[]> {
  const records: CommandRecord[] = [];
  let pageToken = "";
  do {
    const page = await commands.listCommands({ pageSize, pageToken }, { ...(signal ? { signal } : {}), timeoutMs: 30_000 });
    records.push(...page.records);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  return records;
}

/** The whole Kweb history, all pages, in commit order. */
export async function listAllTransactions(read: KmapClients["read"], pageSize = 7): Promise<Transaction[]> {
  const transactions: Transaction[] = [];
  let pageToken = "";
  do {
    const page = await read.listTransactions({ pageSize, pageToken });
    transactions.push(...page.transactions);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  return transactions;
}

export function isTerminalState(state: CommandState | undefined): boolean {
  return state === CommandState.COMMITTED || state === CommandState.FAILED;
}

export function isTerminalEvent(kind: CommandEventKind): boolean {
  return kind === CommandEventKind.COMMITTED || kind === CommandEventKind.FAILED;
}

/** Waits (generously) until each of `ids` has a terminal record; returns every record by id. */
export async function waitUntilTerminal(commands: KmapClients["commands"], ids: readonly string[], timeoutMs = 60_000): Promise<Map<string, CommandRecord>> {
  return waitFor(
    async () => {
      const byId = new Map((await listAllRecords(commands)).map((r) => [r.submission!.idempotencyId, r] as const));
      return ids.every((id) => isTerminalState(byId.get(id)?.state)) ? byId : undefined;
    },
    { timeoutMs, intervalMs: 50, what: `${ids.length} commands to be terminal` },
  );
}

/**
 * The change log from position 0 through the terminal event of `lastId`
 * (the command submitted last: strict order means every earlier command's
 * events come before it), then the watch is cancelled.
 */
export async function readChangeLog(commands: KmapClients["commands"], lastId: string): Promise<WatchCommandsResponse[]> {
  const events: WatchCommandsResponse[] = [];
  const abort = new AbortController();
  try {
    for await (const event of commands.watchCommands({ afterPosition: 0n }, { signal: abort.signal, timeoutMs: 60_000 })) {
      events.push(event);
      if (event.record?.submission?.idempotencyId === lastId && isTerminalEvent(event.kind)) break;
    }
  } finally {
    abort.abort();
  }
  return events;
}

export interface LaneReport {
  /** Final records by idempotency id. */
  readonly records: Map<string, CommandRecord>;
  /** Change-log events by idempotency id, in position order. */
  readonly events: Map<string, WatchCommandsResponse[]>;
  /** Every change-log event, in position order. */
  readonly log: WatchCommandsResponse[];
  /** Kweb history in commit order. */
  readonly transactions: Transaction[];
  /** The transaction of each committed command. */
  readonly transactionOf: Map<string, Transaction>;
}

const kindName = (kind: CommandEventKind) => CommandEventKind[kind] ?? String(kind);

/**
 * Submits a sentinel (an update of a missing node: it fails and adds no
 * transaction) after everything the model planned, waits until every
 * command is terminal, and checks every invariant listed at the top of this
 * file. Throws an Error naming the first violation; returns what it read.
 */
export async function verifyLane(clients: KmapClients, model: KmapModel): Promise<LaneReport> {
  const sentinel = model.updateMissing("sentinel");
  const submitted = await submitPlanned(clients, sentinel);
  check(!submitted.existing, "the sentinel was new");
  const ids = model.planned.map((p) => p.id);
  await waitUntilTerminal(clients.commands, ids);
  const allRecords = await listAllRecords(clients.commands);
  const records = new Map(allRecords.map((r) => [r.submission!.idempotencyId, r] as const));

  // Records: exactly the planned commands, in planned order, with the predicted outcomes.
  check(allRecords.length === model.planned.length, `${allRecords.length} records for ${model.planned.length} submitted commands`);
  let previousSequence = 0n;
  for (const planned of model.planned) {
    const record = records.get(planned.id);
    const what = `${planned.label} ${planned.id}`;
    check(record !== undefined, `no record for ${what}`);
    check(record.sequence > previousSequence, `${what} is out of submission order (sequence ${record.sequence} after ${previousSequence})`);
    previousSequence = record.sequence;
    check(equals(CommandSchema, record.submission!.command!, planned.request.command!), `${what}: the stored command differs from the submitted one`);
    check(sameMap(record.submission!.expectedTransactionIds, planned.request.expectedTransactionIds), `${what}: the stored expectations differ`);
    if (planned.expected === "committed") {
      check(record.state === CommandState.COMMITTED, `${what} should be COMMITTED, is ${CommandState[record.state]} (${record.error?.code}: ${record.error?.message})`);
      check(/^[0-9a-f]{32}$/.test(record.transactionId), `${what} is committed without a transaction id`);
      check(record.error === undefined, `${what} is committed with an error`);
    } else {
      check(record.state === CommandState.FAILED, `${what} should be FAILED (${planned.expected}), is ${CommandState[record.state]}`);
      check(record.error?.code === planned.expected, `${what} failed with ${record.error?.code}, expected ${planned.expected}`);
      check(record.transactionId === "", `${what} is failed but names transaction ${record.transactionId}`);
    }
  }

  // The change log.
  const log = await readChangeLog(clients.commands, sentinel.id);
  const events = new Map<string, WatchCommandsResponse[]>();
  let previousPosition = 0n;
  for (const event of log) {
    check(event.position > previousPosition, `change log positions do not increase (${event.position} after ${previousPosition})`);
    previousPosition = event.position;
    const id = event.record?.submission?.idempotencyId ?? "";
    check(records.has(id), `the change log names an unknown command ${id}`);
    events.set(id, [...(events.get(id) ?? []), event]);
  }
  let previousTerminal = 0n;
  for (const planned of model.planned) {
    const record = records.get(planned.id)!;
    const own = events.get(planned.id) ?? [];
    const what = `${planned.label} ${planned.id}`;
    const kinds = own.map((e) => kindName(e.kind)).join(" ");
    check(own[0]?.kind === CommandEventKind.QUEUED, `${what}: the change log does not start with QUEUED: ${kinds}`);
    for (let i = 1; i < own.length; i++) {
      const kind = own[i]!.kind;
      const before = own[i - 1]!.kind;
      if (kind === CommandEventKind.APPLYING) {
        check(
          before === CommandEventKind.QUEUED || before === CommandEventKind.RETRY_SCHEDULED || before === CommandEventKind.RECOVERED,
          `${what}: APPLYING follows ${kindName(before)}: ${kinds}`,
        );
      } else {
        check(before === CommandEventKind.APPLYING, `${what}: ${kindName(kind)} follows ${kindName(before)}: ${kinds}`);
        check(kind !== CommandEventKind.QUEUED, `${what}: queued twice: ${kinds}`);
      }
    }
    const terminal = own.filter((e) => isTerminalEvent(e.kind));
    check(terminal.length === 1, `${what} has ${terminal.length} terminal events: ${kinds}`);
    const last = own.at(-1)!;
    check(isTerminalEvent(last.kind), `${what}: the last event is ${kindName(last.kind)}: ${kinds}`);
    check(last.record!.state === record.state && last.record!.transactionId === record.transactionId, `${what}: the terminal event disagrees with the record`);
    check(last.position > previousTerminal, `${what} reached its outcome before an earlier command did`);
    previousTerminal = last.position;
    const applying = own.filter((e) => e.kind === CommandEventKind.APPLYING).length;
    check(applying === record.attempts, `${what}: ${applying} APPLYING events but ${record.attempts} attempts: ${kinds}`);
  }

  // Kweb history.
  const transactions = await listAllTransactions(clients.read);
  const committed = model.planned.filter((p) => records.get(p.id)!.state === CommandState.COMMITTED);
  check(transactions.length === committed.length, `${transactions.length} transactions for ${committed.length} committed commands`);
  const transactionOf = new Map<string, Transaction>();
  transactions.forEach((transaction, index) => {
    check(transaction.sequence === BigInt(index + 1), `transaction ${index + 1} has sequence ${transaction.sequence}`);
    check(!transactionOf.has(transaction.provenance), `two transactions carry provenance ${transaction.provenance}`);
    transactionOf.set(transaction.provenance, transaction);
  });
  let previousTransaction = 0n;
  for (const planned of model.planned) {
    const record = records.get(planned.id)!;
    const transaction = transactionOf.get(planned.id);
    const what = `${planned.label} ${planned.id}`;
    if (record.state !== CommandState.COMMITTED) {
      check(transaction === undefined, `failed ${what} has transaction ${transaction?.id}`);
      continue;
    }
    check(transaction !== undefined, `committed ${what} has no transaction`);
    check(transaction.id === record.transactionId, `${what}: the record names ${record.transactionId}, history ${transaction.id}`);
    check(transaction.createdNodeId === record.createdNodeId, `${what}: created node ${record.createdNodeId} vs ${transaction.createdNodeId}`);
    check(equals(CommandSchema, transaction.command!, planned.request.command!), `${what}: the transaction's command differs from the submitted one`);
    check(transaction.sequence > previousTransaction, `${what} committed out of submission order`);
    previousTransaction = transaction.sequence;
    const byProvenance = await clients.read.listTransactions({ provenance: planned.id });
    check(
      byProvenance.transactions.length === 1 && byProvenance.transactions[0]!.id === transaction.id,
      `${what}: ListTransactions by provenance returns ${byProvenance.transactions.length} transactions`,
    );
  }

  // Signatures and the digest chain.
  const key = await clients.read.getSigningKey({});
  let previousPayload: Uint8Array | undefined;
  for (const transaction of transactions) {
    const problem = verifyTransaction(transaction, key.publicKey);
    check(problem === undefined, `transaction ${transaction.sequence} does not verify: ${problem}`);
    check(transaction.keyId === key.keyId, `transaction ${transaction.sequence} names key ${transaction.keyId}, served ${key.keyId}`);
    const expectedDigest = previousPayload === undefined ? Buffer.alloc(32) : createHash("sha256").update(previousPayload).digest();
    check(Buffer.from(transaction.previousDigest).equals(expectedDigest), `transaction ${transaction.sequence} does not chain to the one before it`);
    previousPayload = transaction.signedPayload;
  }

  return { records, events, log, transactions, transactionOf };
}

function sameMap(a: Record<string, string>, b: Record<string, string>): boolean {
  const keys = Object.keys(a).sort();
  return keys.join() === Object.keys(b).sort().join() && keys.every((k) => a[k] === b[k]);
}

function check(condition: boolean, message: string): asserts condition {
  if (!condition) throw new Error(`Kmap lane invariant violated: ${message}`);
}

/** The state letter of /proc/<pid>/stat (`T` when stopped), or undefined when the process is gone. */
export async function processState(pid: number): Promise<string | undefined> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    // The command name is in parentheses and may hold spaces: the state follows the last ")".
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
  } catch {
    return undefined;
  }
}

/** What the pause helpers need of a Laneway child process. */
interface PausableProcess {
  readonly pid: number;
  readonly stdout: readonly string[];
}

/** A `laneway-kmap-paused <point> <id>` line the process printed, if any. */
export function pausedAt(laneway: PausableProcess): { point: string; id: string } | undefined {
  for (const line of laneway.stdout) {
    const match = /^laneway-kmap-paused (\S+) ([0-9a-f]{32})$/.exec(line);
    if (match) return { point: match[1]!, id: match[2]! };
  }
  return undefined;
}

/**
 * Waits for the pause line, then until /proc says the process is stopped.
 * Rejects at the deadline, or as soon as `signal` aborts (the test gave up
 * on a pause, for example because it killed the process).
 */
export async function waitUntilPaused(
  laneway: PausableProcess,
  options: { timeoutMs?: number; signal?: AbortSignal } = {},
): Promise<{ point: string; id: string }> {
  const deadline = Date.now() + (options.timeoutMs ?? 60_000);
  for (;;) {
    const paused = pausedAt(laneway);
    if (paused && (await processState(laneway.pid)) === "T") return paused;
    if (options.signal?.aborted) throw new Error("no longer waiting for the pause");
    if (Date.now() > deadline) {
      throw new Error(paused ? `process ${laneway.pid} printed the pause line but did not stop` : "timed out waiting for the pause line");
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/**
 * Checks the Kmap as the nodes show it: every node the model knows has, as
 * its visible transaction, the transaction of the last command predicted
 * to commit that touched it; and there are exactly as many nodes as
 * committed creations.
 */
export async function verifyNodes(clients: KmapClients, model: KmapModel, report: LaneReport): Promise<void> {
  model.observe(report.records.values());
  for (const nodeId of model.nodes) {
    const { node } = await clients.read.getNode({ nodeId });
    const last = model.lastCommandTouching(nodeId);
    const expected = report.records.get(last)!.transactionId;
    check(node?.visibleTransactionId === expected, `node ${nodeId} is at transaction ${node?.visibleTransactionId}, expected ${expected} (${model.get(last).label})`);
  }
  let count = 0;
  let pageToken = "";
  do {
    const page = await clients.read.listNodes({ pageSize: 50, pageToken });
    count += page.nodes.length;
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  const creations = model.planned.filter((p) => p.request.command?.operation.case === "createNode" && report.records.get(p.id)?.state === CommandState.COMMITTED);
  check(count === creations.length, `${count} nodes for ${creations.length} committed creations`);
  check(count === model.nodes.length, `${count} nodes, the model knows ${model.nodes.length}`);
}

/** `laneway serve` as a child process that may pause (SIGSTOP) before it listens. */
export interface KmapProcess {
  readonly pid: number;
  readonly tokens: TestTokens;
  readonly stdout: string[];
  readonly stderr: string[];
  /** The base URL; undefined when the process paused before listening. */
  readonly url: string | undefined;
  readonly clients: ClientPool;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Whether the process has exited (on its own or killed). */
  hasExited(): boolean;
  kill(signal?: NodeJS.Signals): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Like startLanewayProcess, on an existing data directory, without lanes,
 * but it also returns when the process paused before listening: on a
 * restart the runtime starts on the backlog right after the Kmap core
 * opens, so a pause point can be reached before the listener is up (a kill
 * during startup recovery is a scenario worth having).
 */
export async function startKmapProcess(options: { dataDir: string; tokens: TestTokens; pauseAt?: string | undefined }): Promise<KmapProcess> {
  const args = ["serve", "--listen", "127.0.0.1:0", "--data-dir", options.dataDir, "--shutdown-timeout", "5s"];
  const env: Record<string, string> = { LANEWAY_ADMIN_TOKEN: options.tokens.admin };
  if (options.pauseAt) env.LANEWAY_KMAP_PAUSE_AT = options.pauseAt;
  const child = spawnLaneway(args, env);
  const stdout: string[] = [];
  const stderr: string[] = [];
  collectLines(child.stdout!, stdout);
  collectLines(child.stderr!, stderr);
  let done = false;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => {
      done = true;
      resolve({ code, signal });
    }),
  );
  const kill = (signal: NodeJS.Signals = "SIGTERM") => {
    if (!done) child.kill(signal);
    return exited;
  };
  let started: string;
  try {
    started = await waitFor(
      async () => {
        const line = stdout.find((l) => l.includes(" listening on "));
        if (line) return line.slice(line.indexOf("http://"));
        if (pausedAt({ pid: child.pid!, stdout }) && (await processState(child.pid!)) === "T") return "paused";
        return done ? "exited" : undefined;
      },
      { timeoutMs: 60_000, what: "laneway to listen or pause" },
    );
  } catch (error) {
    await kill("SIGKILL");
    throw error;
  }
  if (started === "exited") throw new Error(`laneway exited before listening: ${stderr.join("\n")}`);
  const listening = started === "paused" ? undefined : started;
  return {
    pid: child.pid!,
    tokens: options.tokens,
    stdout,
    stderr,
    url: listening,
    clients: new ClientPool(() => listening!),
    exited,
    hasExited: () => done,
    kill,
  };
}

function collectLines(stream: NodeJS.ReadableStream, into: string[]): void {
  let partial = "";
  stream.setEncoding("utf8");
  stream.on("data", (chunk: string) => {
    partial += chunk;
    const lines = partial.split("\n");
    partial = lines.pop() ?? "";
    into.push(...lines);
  });
  stream.on("end", () => {
    if (partial) into.push(partial);
  });
}

/**
 * Takes the write lock of a SQLite file from the test's own connection
 * (BEGIN IMMEDIATE), as another process could, until `release`.
 */
export function holdWriteLock(path: string): { release(): void } {
  const db = new Database(path, { timeout: 10_000 });
  try {
    db.exec("BEGIN IMMEDIATE");
  } catch (error) {
    db.close();
    throw error;
  }
  return {
    release() {
      if (!db.open) return;
      if (db.inTransaction) db.exec("ROLLBACK");
      db.close();
    },
  };
}
