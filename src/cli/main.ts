// First: protobuf-es picks its base64 encoder when it is first imported (see the module).
import "../encoding/uint8array-base64.js";
import { Code, ConnectError } from "@connectrpc/connect";
import { describeFailure, OutcomeError, UsageError, type CliIo } from "./command.js";
import { clientHelp, commandUsage, groupUsage, type CommandGroup } from "./command-group.js";
import { healthCommand } from "./health-command.js";
import { hiveCommands } from "./hive-commands.js";
import { kmapCommands } from "./kmap-commands.js";
import { lanesCommands } from "./lanes-commands.js";
import { serveCommand } from "./serve.js";
import { lanewayVersion } from "./version.js";

/**
 * The `laneway` command. Client commands call the server through the
 * generated client; `serve` runs the server.
 *
 * Exit codes: 0 success; 1 the call or the server failed; 2 usage or
 * configuration error.
 */

const groups: readonly CommandGroup[] = [lanesCommands, hiveCommands, kmapCommands];

const topLevel: readonly (readonly [string, string])[] = [
  ["serve [flags]", "run the server (laneway serve --help lists its flags)"],
  ["version", "print the version"],
  [healthCommand.usage, healthCommand.summary],
  ...groups.map((g) => [`${g.name} <command>`, g.summary] as const),
];
const topWidth = Math.max(...topLevel.map(([u]) => u.length));

const usage = `usage: laneway <command>

${topLevel.map(([u, summary]) => `  laneway ${u.padEnd(topWidth)}  ${summary}`).join("\n")}

Run 'laneway <group> --help' for a group's commands, 'laneway serve --help' for the server's flags.

${clientHelp}
`;

export async function runCli(argv: readonly string[], io: CliIo): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case undefined:
      case "help":
      case "--help":
      case "-h":
        io.stdout(usage);
        return command === undefined ? 2 : 0;
      case "version":
      case "--version":
        io.stdout(`laneway ${lanewayVersion()}\n`);
        return 0;
      case "serve":
        return await serveCommand(rest, io);
      case "health":
        if (rest.includes("--help") || rest.includes("-h")) {
          io.stdout(`usage: laneway ${healthCommand.usage}\n  ${healthCommand.summary}\n\n${clientHelp}\n`);
          return 0;
        }
        await healthCommand.run(rest, io);
        return 0;
    }
    const group = groups.find((g) => g.name === command);
    if (!group) {
      io.stderr(`laneway: unknown command '${command}'\n\n${usage}`);
      return 2;
    }
    const [name, ...args] = rest;
    if (name === undefined || name === "--help" || name === "-h" || name === "help") {
      io.stdout(groupUsage(group));
      return name === undefined ? 2 : 0;
    }
    const spec = group.commands.find((c) => c.name === name);
    if (!spec) {
      io.stderr(`laneway: unknown command '${group.name} ${name}'\n\n${groupUsage(group)}`);
      return 2;
    }
    if (args.includes("--help") || args.includes("-h")) {
      io.stdout(commandUsage(group, spec));
      return 0;
    }
    try {
      await spec.run(args, io);
    } catch (error) {
      if (error instanceof UsageError) {
        io.stderr(`laneway: ${error.message}\n${commandUsage(group, spec)}`);
        return 2;
      }
      throw error;
    }
    return 0;
  } catch (error) {
    if (error instanceof UsageError) {
      io.stderr(`laneway: ${error.message}\n`);
      return 2;
    }
    if (error instanceof ConnectError) {
      // Interrupted (Ctrl-C, SIGTERM) while following or watching: a normal end.
      if (io.signal.aborted && error.code === Code.Canceled) return 0;
      io.stderr(`laneway: ${describeFailure(error)}\n`);
      return 1;
    }
    if (error instanceof OutcomeError) {
      io.stderr(`laneway: ${error.message}\n`);
      return 1;
    }
    throw error;
  }
}

/** Runs the CLI as the process's program (bin/laneway.js, or this file run directly). */
export async function main(): Promise<void> {
  const controller = new AbortController();
  const argv = process.argv.slice(2);
  if (argv[0] !== "serve") {
    process.once("SIGINT", () => controller.abort());
    process.once("SIGTERM", () => controller.abort());
  }
  const io: CliIo = {
    env: process.env,
    stdout: (t) => process.stdout.write(t),
    stderr: (t) => process.stderr.write(t),
    signal: controller.signal,
  };
  const code = await runCli(argv, io);
  process.exitCode = code;
  // Long-lived handles (signal listeners) must not keep a finished command alive.
  setImmediate(() => process.exit(code));
}

if (process.argv[1] !== undefined && import.meta.filename === process.argv[1]) {
  await main();
}
