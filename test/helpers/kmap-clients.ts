/**
 * The generated Kmap clients with the operator token, and reads that page
 * through whole lists or wait for commands to finish.
 */
import type { Client } from "@connectrpc/connect";
import { CommandState, type CommandRecord } from "../../gen/laneway/kmap/v1/command_pb.js";
import { CommandEventKind, KmapCommandService, type WatchCommandsResponse } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { KmapReadService, type Transaction } from "../../gen/laneway/kmap/v1/kmap_read_service_pb.js";
import type { ClientPool, TestTokens } from "./laneway.js";
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
