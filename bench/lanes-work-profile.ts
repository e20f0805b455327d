/**
 * Reads a V8 `.cpuprofile` of the Laneway process (`node --cpu-prof`) and
 * says where its CPU time went during given time windows (the measured
 * runs of `npm run bench lanes-work`), by self time:
 *
 * - grouped into categories (GC, nats.js, Connect/protobuf, ledger JSON
 *   encode/decode, receipt hashing, envelope decoding, the group actor, the
 *   ledger state machine, CAS retry waits, Node's own http/net/streams …),
 *   a sample's category being decided by its stack: a few Laneway
 *   functions claim everything below them (a `JSON.stringify` inside
 *   `encodeLedger` is ledger encoding), otherwise the innermost frame with
 *   a script decides;
 * - and the functions with the most self time.
 *
 * Windows are CLOCK_MONOTONIC microseconds (`process.hrtime.bigint() /
 * 1000n` in the orchestrator), the clock V8 stamps profile samples with on
 * Linux; samples outside every window (setup publishing, idle gaps) are
 * left out.
 */
import { readdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { printTable } from "./harness.js";

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface ProfileWindow {
  /** Which group of runs the window belongs to (a column of the summary). */
  readonly label: string;
  readonly startUs: number;
  readonly endUs: number;
}

const NODE_CORE = "Node core (http parser, net, streams, timers)";

/** Functions that claim the self time of everything they call. */
const OWNING_FUNCTIONS: readonly [RegExp, string][] = [
  [/^(encodeLedger|decodeLedger|toLedger)$/, "ledger encode/decode (JSON, whole ledger per CAS)"],
  [/^(receiptHash|newReceipt)$/, "receipts (SHA-256 hash, random)"],
  [/^(decodeEnvelope|recordOf)$/, "record envelope decode"],
  [/^jitter$/, "CAS retry (jitter waits)"],
  [/^(snapshotOf|restore)$/, "group actor (per-op draft snapshots)"],
];

function categoryOfFrame(frame: CallFrame): string | undefined {
  const { url, functionName } = frame;
  if (functionName === "(garbage collector)") return "GC";
  if (functionName === "(program)") return "V8/native (program)";
  if (functionName === "(idle)") return "(idle)";
  if (url === "") return undefined; // a builtin: its caller decides
  if (url.includes("/@nats-io/")) return "nats.js (client, protocol, JetStream/KV API)";
  if (url.includes("/@connectrpc/") || url.includes("/@bufbuild/")) return "Connect/protobuf (server, validation)";
  if (url.includes("/gen/")) return "Connect/protobuf (server, validation)";
  if (url.includes("/src/lanes/group-ledger.ts")) return "ledger state machine (LedgerDraft)";
  if (url.includes("/src/lanes/work-groups.ts")) return "group actor (work-groups.ts)";
  if (url.includes("/src/lanes/lane-store.ts")) return "lane store (broker calls, error wrapping)";
  if (url.includes("/src/lanes/")) return "other lanes core";
  if (url.includes("/src/server/")) return "Laneway server layer (auth, routing, mapping)";
  if (url.includes("/src/")) return "other Laneway";
  if (url.includes("/node_modules/")) return "other node_modules";
  if (url.startsWith("node:")) return NODE_CORE;
  return "other";
}

function frameName(frame: CallFrame): string {
  const { url } = frame;
  const short = url.includes("/node_modules/")
    ? url.slice(url.lastIndexOf("/node_modules/") + "/node_modules/".length)
    : url.includes("/src/") || url.includes("/gen/")
      ? url.slice(Math.max(url.lastIndexOf("/src/"), url.lastIndexOf("/gen/")) + 1)
      : url.replace(/^file:\/\//, "");
  return `${frame.functionName || "(anonymous)"} ${url === "" ? "(native)" : `${short}:${frame.lineNumber + 1}`}`;
}

/**
 * The main thread's profile (`CPU.<date>.<time>.<pid>.0.<n>.cpuprofile`;
 * worker threads write their own, with another thread id) of the newest
 * process that wrote one to `dir` after `sinceMs` (epoch ms).
 */
export async function newestProfile(dir: string, sinceMs: number): Promise<string | undefined> {
  let newest: { path: string; at: number } | undefined;
  for (const name of await readdir(dir)) {
    if (!/\.\d+\.0\.\d+\.cpuprofile$/.test(name)) continue;
    const path = join(dir, name);
    const at = (await stat(path)).mtimeMs;
    if (at >= sinceMs && (newest === undefined || at > newest.at)) newest = { path, at };
  }
  return newest?.path;
}

/** Prints the category table (a column per window label) and the top self-time functions of all windows. */
export async function summarizeProfile(path: string, windows: readonly ProfileWindow[], topFunctions = 15): Promise<void> {
  const profile = JSON.parse(await readFile(path, "utf8")) as CpuProfile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const categoryCache = new Map<number, string>();
  const categoryOf = (id: number): string => {
    const cached = categoryCache.get(id);
    if (cached !== undefined) return cached;
    const leaf = byId.get(id)!;
    let category: string | undefined;
    // An owning function anywhere on the stack (nearest first) claims the sample.
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const name = byId.get(at)!.callFrame.functionName;
      const owner = OWNING_FUNCTIONS.find(([pattern]) => pattern.test(name));
      if (owner) {
        category = owner[1];
        break;
      }
    }
    // Otherwise the innermost frame with a script (a builtin's caller);
    // Node's own code is charged to the library that called it, if any.
    for (let at: number | undefined = id; category === undefined && at !== undefined; at = parent.get(at)) {
      category = categoryOfFrame(byId.get(at)!.callFrame);
      if (category === NODE_CORE) {
        for (let up = parent.get(at); up !== undefined; up = parent.get(up)) {
          const caller = categoryOfFrame(byId.get(up)!.callFrame);
          if (caller === undefined || caller === NODE_CORE) continue;
          if (caller.startsWith("nats.js")) category = "Node core under nats.js (socket writes, timers)";
          else if (caller.startsWith("Connect") || caller.startsWith("Laneway server")) category = "Node core under Connect (HTTP, abort signals)";
          break;
        }
      }
    }
    category ??= categoryOfFrame(leaf.callFrame) ?? "other";
    categoryCache.set(id, category);
    return category;
  };

  const labels = [...new Set(windows.map((w) => w.label))];
  const sorted = [...windows].sort((a, b) => a.startUs - b.startUs);
  const perLabel = new Map<string, Map<string, number>>(labels.map((l) => [l, new Map()]));
  const busyPerLabel = new Map<string, number>(labels.map((l) => [l, 0]));
  const selfByFunction = new Map<string, number>();
  let inWindows = 0;
  let time = profile.startTime;
  let w = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    time += profile.timeDeltas[i] ?? 0;
    // The sample's weight: the time until the next one (the last gets the mean).
    const weight = profile.timeDeltas[i + 1] ?? (profile.endTime - profile.startTime) / profile.samples.length;
    while (w < sorted.length && sorted[w]!.endUs < time) w++;
    const window = sorted[w];
    if (window === undefined || time < window.startUs) continue;
    const id = profile.samples[i]!;
    const category = categoryOf(id);
    if (category === "(idle)") continue;
    inWindows += weight;
    const counts = perLabel.get(window.label)!;
    counts.set(category, (counts.get(category) ?? 0) + weight);
    busyPerLabel.set(window.label, busyPerLabel.get(window.label)! + weight);
    const name = frameName(byId.get(id)!.callFrame);
    selfByFunction.set(name, (selfByFunction.get(name) ?? 0) + weight);
  }
  if (inWindows === 0) {
    console.log(`(the profile ${path} has no busy samples inside the measured runs: its clock did not match)`);
    return;
  }
  const categories = [...new Set(labels.flatMap((l) => [...perLabel.get(l)!.keys()]))];
  const total = (c: string) => labels.reduce((s, l) => s + (perLabel.get(l)!.get(c) ?? 0), 0);
  categories.sort((a, b) => total(b) - total(a));
  const pct = (part: number, whole: number) => (whole > 0 ? `${((100 * part) / whole).toFixed(1)}%` : "");
  printTable(
    ["Laneway CPU by category (self time, % of busy)", ...labels.map((l) => `${l} (${(busyPerLabel.get(l)! / 1e6).toFixed(1)} s)`)],
    categories.map((c) => [c, ...labels.map((l) => pct(perLabel.get(l)!.get(c) ?? 0, busyPerLabel.get(l)!))]),
  );
  console.log("");
  const top = [...selfByFunction.entries()].sort((a, b) => b[1] - a[1]).slice(0, topFunctions);
  printTable(
    ["top self-time functions, all measured Laneway runs", "ms", "% of busy"],
    top.map(([name, us]) => [name, (us / 1000).toFixed(0), pct(us, inWindows)]),
  );
}
