import type { CliIo } from "./command.js";

/** One `laneway <group> <name>` command. */
export interface CommandSpec {
  readonly name: string;
  /** The arguments after the group name; a first line, then optional detail lines. */
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

/**
 * A group's help: each command's usage line, with its summary and any
 * detail lines indented below it, so that nothing is padded to the width of
 * the longest usage.
 */
export function groupUsage(group: CommandGroup): string {
  const lines = group.commands.flatMap((c) => commandLines(group, c));
  return [`laneway ${group.name}: ${group.summary}`, "", ...lines, "", clientHelp].join("\n") + "\n";
}

/** One command's help (`laneway <group> <command> --help`). */
export function commandUsage(group: CommandGroup, command: CommandSpec): string {
  return ["usage:", ...commandLines(group, command), "", clientHelp].join("\n") + "\n";
}

function commandLines(group: CommandGroup, command: CommandSpec): string[] {
  const [first = "", ...detail] = command.usage.split("\n").map((l) => l.trimEnd());
  return [`  laneway ${group.name} ${first}`, `      ${command.summary}`, ...detail.map((l) => `      ${l}`)];
}

export const clientHelp = [
  "Client options (every command):",
  "  --address URL      server base URL (LANEWAY_ADDRESS, default http://127.0.0.1:7600)",
  "  --protocol P       connect-json | connect-binary | grpc | grpc-web (LANEWAY_PROTOCOL, default connect-json)",
  "  --token-env NAME   environment variable holding the bearer token (default LANEWAY_TOKEN)",
].join("\n");
