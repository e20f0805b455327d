import type { CliIo } from "./command.js";

/** One `laneway <group> <name>` command. */
export interface CommandSpec {
  readonly name: string;
  readonly usage: string;
  readonly summary: string;
  run(args: readonly string[], io: CliIo): Promise<void>;
}

/** A named set of commands, such as `lanes` or `kmap`. */
export interface CommandGroup {
  readonly name: string;
  readonly summary: string;
  readonly commands: readonly CommandSpec[];
}

export function groupUsage(group: CommandGroup): string {
  const width = Math.max(...group.commands.map((c) => c.usage.length));
  const lines = group.commands.map((c) => `  laneway ${group.name} ${c.usage.padEnd(width)}  ${c.summary}`);
  return [`laneway ${group.name}: ${group.summary}`, "", ...lines, "", clientHelp].join("\n") + "\n";
}

export const clientHelp = [
  "Client options (every command):",
  "  --address URL      server base URL (LANEWAY_ADDRESS, default http://127.0.0.1:7600)",
  "  --protocol P       connect-json | connect-binary | grpc | grpc-web (LANEWAY_PROTOCOL, default connect-json)",
  "  --token-env NAME   environment variable holding the bearer token (default LANEWAY_TOKEN)",
].join("\n");
