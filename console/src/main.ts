/**
 * The Laneway console: one page on the generated client (gen/) over
 * @connectrpc/connect-web, served by `laneway serve` at /console/.
 *
 * The token typed into the page lives in one variable of this module and
 * nowhere else: not in localStorage, sessionStorage, cookies, IndexedDB or
 * the URL. Reloading the page forgets it. Every view calls the RPCs with
 * it and shows what the server answers, refusals included (code, reason
 * and message), so a project token shows what that project may see.
 * Data from the server is put into the page as text, never as markup.
 */
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import { CommandState, type CommandRecord } from "../../gen/laneway/kmap/v1/command_pb.js";
import { KmapCommandService } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { KmapReadService, type Transaction } from "../../gen/laneway/kmap/v1/kmap_read_service_pb.js";
import { DeliveryState, LaneService, RecordKind, type GroupState, type LaneRecord } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { HiveHubService } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";

// ------------------------------------------------------------ token and clients

/** The bearer token: memory only. */
let token = "";

const auth: Interceptor = (next) => async (req) => {
  if (token !== "") req.header.set("Authorization", `Bearer ${token}`);
  return next(req);
};

const transport = createConnectTransport({ baseUrl: location.origin, interceptors: [auth] });
const lanes: Client<typeof LaneService> = createClient(LaneService, transport);
const kmap: Client<typeof KmapCommandService> = createClient(KmapCommandService, transport);
const kmapRead: Client<typeof KmapReadService> = createClient(KmapReadService, transport);
const hub: Client<typeof HiveHubService> = createClient(HiveHubService, transport);

/** Streams of the current view, ended when the view changes or the token does. */
let streams = new AbortController();

// ------------------------------------------------------------ DOM helpers

type Child = Node | string | number | bigint | boolean | undefined | null;

function h(tag: string, attrs: Record<string, string | boolean | ((e: Event) => void)> = {}, ...children: Child[]): HTMLElement {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (typeof value === "function") el.addEventListener(key.replace(/^on/, ""), value);
    else if (typeof value === "boolean") {
      if (value) el.setAttribute(key, "");
    } else el.setAttribute(key, value);
  }
  for (const child of children) if (child !== undefined && child !== null) el.append(child instanceof Node ? child : String(child));
  return el;
}

function table(headers: string[], rows: Child[][], attrs: Record<string, string> = {}): HTMLElement {
  return h("table", attrs, h("thead", {}, h("tr", {}, ...headers.map((t) => h("th", {}, t)))), h("tbody", {}, ...rows.map((r) => h("tr", {}, ...r.map((c) => h("td", {}, c))))));
}

/** A refusal as the server gave it: Connect code, ErrorDetail reason, message. */
function describe(error: unknown): string {
  const e = ConnectError.from(error);
  const reason = e.findDetails(ErrorDetailSchema)[0]?.reason;
  const code = Code[e.code]?.replace(/[A-Z]/g, (c, i: number) => (i === 0 ? c.toLowerCase() : `_${c.toLowerCase()}`)) ?? String(e.code);
  return `${code}${reason ? ` (${reason})` : ""}: ${e.rawMessage}`;
}

function errorBox(error: unknown, what: string): HTMLElement {
  return h("div", { class: "error", "data-error": what }, `${what}: ${describe(error)}`);
}

const time = (t: { seconds: bigint; nanos: number } | undefined) => (t === undefined ? "" : new Date(Number(t.seconds) * 1000 + Math.floor(t.nanos / 1e6)).toISOString());
/** A copy on its own ArrayBuffer, as WebCrypto's types want. */
const own = (bytes: Uint8Array): Uint8Array<ArrayBuffer> => new Uint8Array(bytes);
const hex = (bytes: Uint8Array) => [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");

async function section(into: HTMLElement, title: string, id: string, body: () => Promise<Child | Child[]>): Promise<void> {
  const box = h("div", { id });
  into.append(h("h2", {}, title), box);
  try {
    const content = await body();
    for (const c of Array.isArray(content) ? content : [content]) if (c !== undefined && c !== null) box.append(c instanceof Node ? c : String(c));
  } catch (error) {
    box.append(errorBox(error, title));
  }
}

// ------------------------------------------------------------ views

const views: Record<string, (el: HTMLElement) => Promise<void>> = { lanes: lanesView, group: groupView, kmap: kmapView, hive: hiveView };
let current = "lanes";
/** Counts show() calls: a view whose rendering an earlier call started must not undo a later call's choice. */
let shown = 0;

async function show(view: string): Promise<void> {
  const mine = ++shown;
  current = view;
  streams.abort();
  streams = new AbortController();
  for (const button of document.querySelectorAll<HTMLButtonElement>("nav button")) button.classList.toggle("active", button.dataset.view === view);
  // Every view's visibility is decided before anything is awaited: a slower
  // rendering started by an earlier call (a tab clicked while the first view
  // still loads) cannot hide the view chosen after it.
  for (const name of Object.keys(views)) document.getElementById(`view-${name}`)!.hidden = name !== view;
  const el = document.getElementById(`view-${view}`)!;
  el.replaceChildren();
  el.dataset.ready = "false";
  await views[view]!(el);
  if (mine === shown) el.dataset.ready = "true";
}

async function lanesView(el: HTMLElement): Promise<void> {
  if (token === "") return void el.append(h("p", { class: "muted" }, "Type a project token to see its lanes."));
  let registry;
  try {
    registry = await lanes.getRegistry({});
  } catch (error) {
    el.append(errorBox(error, "Registry"));
    return;
  }
  el.append(h("p", {}, "Project ", h("b", { id: "project" }, registry.project), " in namespace ", h("b", {}, registry.namespace)));
  const followBox = h("div", { id: "follows" });
  const rows: Child[][] = [];
  for (const access of registry.lanes) {
    let first: Child = "—";
    let last: Child = "—";
    let lastSequence = 0n;
    if (access.subscribe) {
      try {
        const page = await lanes.replay({ lane: access.lane, cursor: 0n, maxEvents: 1 });
        first = page.firstRetained;
        last = page.lastSequence;
        lastSequence = page.lastSequence;
      } catch (error) {
        first = errorBox(error, "Replay");
      }
    }
    const follow = access.subscribe ? h("button", { "data-follow": access.lane, onclick: () => startFollow(access.lane, lastSequence, followBox) }, "Follow") : "—";
    rows.push([access.lane, access.owner, access.publish ? "yes" : "no", access.subscribe ? "yes" : "no", access.groups.join(", "), access.recoverGroups.join(", "), first, last, follow]);
  }
  el.append(h("h2", {}, "Registry and positions"), table(["lane", "owner", "publish", "subscribe", "groups", "may recover", "first retained", "last sequence", "live"], rows, { id: "registry" }), followBox);
}

function recordLine(r: LaneRecord): HTMLElement {
  return h("div", { "data-sequence": String(r.sequence), "data-id": r.id }, `#${r.sequence} ${RecordKind[r.kind]?.toLowerCase() ?? r.kind} ${r.id} ${r.schema} from ${r.project} (${r.payload.byteLength} bytes) ${time(r.createdAt)}`);
}

function startFollow(lane: string, from: bigint, into: HTMLElement): void {
  const box = h("div", { class: "follow", id: `follow-${lane}`, "data-state": "opening" });
  into.replaceChildren(h("h2", {}, `Following ${lane} after #${from}`), box);
  const signal = streams.signal;
  void (async () => {
    try {
      for await (const page of lanes.follow({ lane, cursor: from }, { signal })) {
        box.dataset.state = "open";
        for (const record of page.events) box.append(recordLine(record));
        box.dataset.cursor = String(page.cursor);
      }
    } catch (error) {
      if (!signal.aborted) box.append(errorBox(error, "Follow"));
    }
  })();
}

async function groupView(el: HTMLElement): Promise<void> {
  if (token === "") return void el.append(h("p", { class: "muted" }, "Type a project token that is a member of a group."));
  let registry;
  try {
    registry = await lanes.getRegistry({});
  } catch (error) {
    el.append(errorBox(error, "Registry"));
    return;
  }
  const choices = registry.lanes.flatMap((l) => l.groups.map((g) => ({ lane: l.lane, group: g, recover: l.recoverGroups.includes(g) })));
  if (choices.length === 0) return void el.append(h("p", {}, `Project ${registry.project} is a member of no group.`));
  const select = h("select", { id: "group-select" }, ...choices.map((c, i) => h("option", { value: String(i) }, `${c.lane} / ${c.group}`))) as HTMLSelectElement;
  const out = h("div", { id: "group-state" });
  const inspect = async () => {
    out.replaceChildren();
    const choice = choices[Number(select.value)]!;
    try {
      const state = (await lanes.inspectGroup({ lane: choice.lane, group: choice.group })).group!;
      renderGroup(out, state, choice.recover, inspect);
    } catch (error) {
      out.append(errorBox(error, "InspectGroup"));
    }
  };
  el.append(h("p", {}, select, " ", h("button", { id: "inspect", onclick: () => void inspect() }, "Inspect")), out);
  await inspect();
}

function renderGroup(out: HTMLElement, g: GroupState, mayRecover: boolean, again: () => Promise<void>): void {
  out.append(
    h("h2", {}, `Group ${g.group} of ${g.lane}`),
    table(
      ["revision", "cursor", "first retained", "last sequence", "missing through", "slots", "live leases", "recoveries", "history bytes"],
      [[g.revision, g.cursor, g.firstRetained, g.lastSequence, g.missingThrough, g.slots, g.liveLeases, g.recoveries, `${g.historyBytes} / ${g.historyBudget}`]],
      { id: "group-summary" },
    ),
    h("h2", {}, "Deliveries (leases and retries)"),
    g.deliveries.length === 0
      ? h("p", { id: "deliveries", class: "muted" }, "No unfinished delivery.")
      : table(
          ["sequence", "project", "attempt", "state", "lease expires", "retry at", "retained"],
          g.deliveries.map((d) => [d.sequence, d.project, d.attempt, DeliveryState[d.state]?.toLowerCase() ?? d.state, time(d.leaseExpiresAt), time(d.retryAt), d.retained ? "yes" : "no"]),
          { id: "deliveries" },
        ),
    h("h2", {}, "Completions"),
    table(
      ["first acked", "last acked", "completed", "ranges", "retried"],
      g.completions.map((c) => [time(c.firstAckedAt), time(c.lastAckedAt), c.completed, c.ranges.map((r) => `${r.first}-${r.last}`).join(" "), c.retried.map((r) => `#${r.sequence}@${r.attempt}`).join(" ")]),
      { id: "completions" },
    ),
    h("h2", {}, "Recovery history"),
    g.recoveryHistory.length === 0
      ? h("p", { id: "recoveries", class: "muted" }, "No recovery recorded.")
      : table(
          ["id", "project", "cursor through", "missing through", "expired", "revision", "recorded"],
          g.recoveryHistory.map((r) => [r.id, r.project, r.cursorThrough, r.missingThrough, r.expirations.map((e) => `#${e.sequence}@${e.attempt}`).join(" "), r.revision, time(r.recordedAt)]),
          { id: "recoveries" },
        ),
  );
  // The guarded recovery: what it submits is shown before it can be sent, and sending needs an explicit confirmation.
  const cursorThrough = g.firstRetained - 1n > g.cursor ? g.firstRetained - 1n : g.cursor;
  const missing = g.deliveries.filter((d) => !d.retained).map((d) => d.sequence);
  const id = h("input", { id: "recover-id", value: `console-${Date.now()}`, size: "30" }) as HTMLInputElement;
  const confirm = h("input", { type: "checkbox", id: "recover-confirm" }) as HTMLInputElement;
  const submit = h("button", { id: "recover-submit", disabled: true }, "Submit RecoverGroup") as HTMLButtonElement;
  const result = h("div", { id: "recover-result" });
  confirm.addEventListener("change", () => (submit.disabled = !confirm.checked));
  submit.addEventListener("click", () => {
    submit.disabled = true;
    void (async () => {
      try {
        const answer = await lanes.recoverGroup({ lane: g.lane, group: g.group, id: id.value, revision: g.revision, cursorThrough, missing, expired: [] });
        result.replaceChildren(h("p", { class: "ok" }, `Recovery ${answer.result?.id} recorded at revision ${answer.result?.revision}.`));
        await again();
      } catch (error) {
        result.replaceChildren(errorBox(error, "RecoverGroup"));
      }
    })();
  });
  out.append(
    h(
      "fieldset",
      { id: "recover-form" },
      h("legend", {}, "RecoverGroup"),
      h("p", {}, "Submits revision ", h("b", { id: "recover-revision" }, g.revision), ", cursor_through ", h("b", { id: "recover-cursor" }, cursorThrough), ", missing [", missing.join(", "), "]."),
      mayRecover ? "" : h("p", { class: "muted" }, "This project is not a recoverer of the group: the server will refuse it."),
      h("label", {}, "Recovery id ", id),
      h("br"),
      h("label", {}, confirm, " I read the state above and accept this recovery of the group"),
      h("br"),
      submit,
      result,
    ),
  );
}

const stateNames: Record<number, string> = { [CommandState.QUEUED]: "Queued", [CommandState.APPLYING]: "Applying", [CommandState.COMMITTED]: "Committed", [CommandState.FAILED]: "Failed" };

async function kmapView(el: HTMLElement): Promise<void> {
  if (token === "") return void el.append(h("p", { class: "muted" }, "Type the operator token to see the Kmap."));
  const rows = new Map<string, HTMLElement>();
  const body = h("tbody");
  const commandRow = (r: CommandRecord) => {
    const id = r.submission?.idempotencyId ?? "";
    const state = stateNames[r.state] ?? String(r.state);
    const row = h(
      "tr",
      { "data-command": id },
      h("td", {}, r.sequence),
      h("td", {}, h("code", {}, id)),
      h("td", {}, r.submission?.command?.operation.case ?? ""),
      h("td", { class: `state-${state.toLowerCase()}`, "data-state": state }, state),
      h("td", {}, r.attempts),
      h("td", {}, r.transactionId ?? ""),
      h("td", {}, r.error ? `${r.error.code}: ${r.error.message}` : ""),
    );
    const old = rows.get(id);
    if (old) old.replaceWith(row);
    else body.prepend(row);
    rows.set(id, row);
  };
  let latest = 0n;
  await section(el, "Commands", "commands", async () => {
    const page = await kmap.listCommands({ pageSize: 200 });
    for (const r of page.records) commandRow(r);
    latest = page.status?.latestPosition ?? 0n;
    const s = page.status;
    return [
      h("p", { id: "kmap-status" }, `backlog ${s?.pendingCommands ?? 0n} of at most ${s?.maxPendingCommands ?? 0n}; change log ${s?.oldestPosition ?? 0n}–${s?.latestPosition ?? 0n}`),
      submitForm(),
      h("table", { id: "commands-table" }, h("thead", {}, h("tr", {}, ...["sequence", "idempotency id", "operation", "state", "attempts", "transaction", "error"].map((t) => h("th", {}, t)))), body),
    ];
  });
  // Live states: every change after the list's position.
  const signal = streams.signal;
  const live = h("span", { id: "watch-state" }, "watching…");
  el.querySelector("#commands")?.prepend(live);
  void (async () => {
    try {
      for await (const change of kmap.watchCommands({ afterPosition: latest }, { signal })) {
        live.textContent = `watching (position ${change.position})`;
        if (change.record) commandRow(change.record);
      }
    } catch (error) {
      if (!signal.aborted) live.replaceWith(errorBox(error, "WatchCommands"));
    }
  })();
  await section(el, "Nodes", "nodes", async () => {
    const page = await kmapRead.listNodes({ pageSize: 200 });
    return table(["id", "kind", "title", "parent", "updated"], page.nodes.map((n) => [h("code", {}, n.id), n.kind, n.title, n.parentId, time(n.updatedAt)]), { id: "nodes-table" });
  });
  await section(el, "History (signatures verified in this browser)", "history", async () => {
    const [key, page] = await Promise.all([kmapRead.getSigningKey({}), kmapRead.listTransactions({ pageSize: 200 })]);
    const verifier = await verifierFor(key.publicKey, key.keyId);
    const rows: Child[][] = [];
    for (const t of page.transactions) rows.push([t.sequence, h("code", {}, t.id), t.command?.operation.case ?? "", t.touchedNodeIds.join(", "), time(t.committedAt), await verdict(verifier, t)]);
    return [h("p", { id: "signing-key" }, `Ed25519 key ${key.keyId}`, verifier.keyMatches ? "" : h("span", { class: "bad" }, " — its key id does not match the key")), table(["sequence", "transaction", "operation", "nodes", "committed", "signature"], rows, { id: "history-table" })];
  });
}

function submitForm(): HTMLElement {
  const title = h("input", { id: "node-title", placeholder: "title of a new topic node" }) as HTMLInputElement;
  const result = h("span", { id: "submit-result" });
  return h(
    "form",
    {
      id: "submit-form",
      onsubmit: (e: Event) => {
        e.preventDefault();
        const idempotencyId = hex(crypto.getRandomValues(new Uint8Array(16)));
        kmap
          .submitCommand({ idempotencyId, command: { operation: { case: "createNode", value: { kind: "topic", title: title.value, body: "" } } } })
          .then(
            (answer) => result.replaceChildren(`submitted ${answer.record?.submission?.idempotencyId}`),
            (error: unknown) => result.replaceChildren(errorBox(error, "SubmitCommand")),
          );
      },
    },
    "Create node: ",
    title,
    " ",
    h("button", { type: "submit" }, "Submit"),
    " ",
    result,
  );
}

interface Verifier {
  readonly key: CryptoKey;
  readonly keyId: string;
  readonly keyMatches: boolean;
}

/** The served Ed25519 key, imported for WebCrypto; its key id is recomputed here (SHA-256 of the key, first 16 bytes). */
async function verifierFor(publicKey: Uint8Array, keyId: string): Promise<Verifier> {
  const key = await crypto.subtle.importKey("raw", own(publicKey), { name: "Ed25519" }, false, ["verify"]);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", own(publicKey)));
  return { key, keyId, keyMatches: hex(digest.slice(0, 16)) === keyId };
}

/** Whether a transaction's signature verifies over its signed payload, with the served key. */
async function verdict(verifier: Verifier, t: Transaction): Promise<HTMLElement> {
  let ok = false;
  let why = "the signature does not verify over signed_payload";
  if (t.keyId !== verifier.keyId || !verifier.keyMatches) why = "signed with another key";
  else if (t.signature.byteLength !== 64) why = "the signature is not 64 bytes";
  else ok = await crypto.subtle.verify({ name: "Ed25519" }, verifier.key, own(t.signature), own(t.signedPayload)).catch(() => false);
  return ok ? h("span", { class: "ok", "data-signature": "valid" }, "✓ verified") : h("span", { class: "bad", "data-signature": "invalid" }, `✗ INVALID: ${why}`);
}

async function hiveView(el: HTMLElement): Promise<void> {
  if (token === "") return void el.append(h("p", { class: "muted" }, "Type the operator token to see the hive."));
  await section(el, "Members", "members", async () => {
    const list = await hub.listMembers({});
    const rows: Child[][] = [];
    for (const m of list.members) {
      let grant: Child;
      try {
        const g = await hub.renderGrant({ memberId: m.memberId });
        grant = h("div", { "data-grant": m.memberId }, h("div", {}, `publish: ${g.publishAllow.join(" ")}`), h("div", {}, `subscribe: ${g.subscribeAllow.join(" ")}`), g.publishDeny.length ? h("div", {}, `deny: ${g.publishDeny.join(" ")}`) : undefined);
      } catch (error) {
        grant = errorBox(error, "RenderGrant");
      }
      rows.push([m.memberId, m.scoped ? "scoped" : "hive-wide", m.swarms.join(", "), m.refused ? "refused" : "", grant]);
    }
    return [
      h("p", {}, list.scopingEnabled ? "Scoping is enabled." : "Scoping is not enabled."),
      table(["member", "scope", "swarms", "", "grant"], rows, { id: "members-table" }),
      h("h2", {}, "Retired"),
      table(["member", "retired", "revoked keys"], list.retired.map((r) => [r.memberId, time(r.retiredAt), r.revokedKeys]), { id: "retired-table" }),
    ];
  });
}

// ------------------------------------------------------------ wiring

async function identify(): Promise<string> {
  try {
    const registry = await lanes.getRegistry({});
    return `project ${registry.project}`;
  } catch (error) {
    const e = ConnectError.from(error);
    if (e.code !== Code.PermissionDenied) return `refused: ${describe(error)}`;
  }
  try {
    await kmapRead.getSigningKey({});
    return "operator";
  } catch (error) {
    return `refused: ${describe(error)}`;
  }
}

document.getElementById("token-form")!.addEventListener("submit", (e) => {
  e.preventDefault();
  const input = document.getElementById("token") as HTMLInputElement;
  token = input.value.trim();
  // The field is cleared: the token stays in this module's memory only.
  input.value = "";
  const who = document.getElementById("who")!;
  who.textContent = "checking…";
  void identify().then((text) => {
    who.textContent = text;
    who.dataset.who = text;
    return show(current);
  });
});
document.getElementById("forget")!.addEventListener("click", () => {
  token = "";
  document.getElementById("who")!.textContent = "no token";
  void show(current);
});
for (const button of document.querySelectorAll<HTMLButtonElement>("nav button")) button.addEventListener("click", () => void show(button.dataset.view!));
void show(current);
