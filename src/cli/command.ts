import { parseArgs, type ParseArgsConfig } from "node:util";
import { toJsonString, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import type { DescService } from "@bufbuild/protobuf";
import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import { createLanewayTransport, wireProtocols, type LanewayTransport, type WireProtocol } from "../client/transport.js";

/**
 * What every client command shares: how it finds the server and its token,
 * how it prints answers, and how it reports failures.
 *
 * The token is read from an environment variable (default `LANEWAY_TOKEN`,
 * or the one `--token-env` names), never from a flag: flags are visible to
 * every user of the machine through `ps`.
 */

/** A usage mistake: printed with the command's usage, exit code 2. */
export class UsageError extends Error {
  override readonly name = "UsageError";
}

/** The call succeeded but its outcome is a failure (a command Failed, a signature did not verify): exit code 1. */
export class OutcomeError extends Error {
  override readonly name = "OutcomeError";
}

/** Options every client command accepts. */
export const clientOptions = {
  address: { type: "string" },
  protocol: { type: "string" },
  "token-env": { type: "string" },
  help: { type: "boolean", short: "h" },
} as const satisfies ParseArgsConfig["options"];

export interface ClientSettings {
  readonly baseUrl: string;
  readonly protocol: WireProtocol;
  readonly tokenEnv: string;
  readonly token: string | undefined;
}

/** The process environment and output streams, injectable for tests. */
export interface CliIo {
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly stdout: (text: string) => void;
  readonly stderr: (text: string) => void;
  /** Ends long-running commands (follow, watch) on SIGINT/SIGTERM. */
  readonly signal: AbortSignal;
}

export function clientSettings(values: { address?: string; protocol?: string; "token-env"?: string }, io: CliIo): ClientSettings {
  const baseUrl = values.address ?? io.env.LANEWAY_ADDRESS ?? "http://127.0.0.1:7600";
  if (!/^https?:\/\/[^/@]+\/?$/.test(baseUrl)) {
    throw new UsageError("--address must be an http:// or https:// base URL such as http://127.0.0.1:7600");
  }
  const protocol = (values.protocol ?? io.env.LANEWAY_PROTOCOL ?? "connect-json") as WireProtocol;
  if (!wireProtocols.includes(protocol)) {
    throw new UsageError(`--protocol must be one of ${wireProtocols.join(", ")}`);
  }
  const tokenEnv = values["token-env"] ?? "LANEWAY_TOKEN";
  const token = io.env[tokenEnv];
  return { baseUrl: baseUrl.replace(/\/$/, ""), protocol, tokenEnv, token: token === "" ? undefined : token };
}

/** Parses a command's arguments strictly; unknown flags are usage errors. */
export function parseCommand<O extends ParseArgsConfig["options"]>(args: readonly string[], options: O) {
  try {
    return parseArgs({ args: [...args], options: { ...clientOptions, ...options }, allowPositionals: true, strict: true });
  } catch (error) {
    // parseArgs quotes the offending argument, which may be a pasted secret.
    const code = (error as { code?: string }).code;
    throw new UsageError(code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" ? "unknown option (see --help)" : "invalid arguments (see --help)");
  }
}

/** Calls `body` with a generated client of `service` and releases its connections afterwards. */
export async function withClient<S extends DescService, T>(
  service: S,
  values: Parameters<typeof clientSettings>[0],
  io: CliIo,
  body: (client: Client<S>) => Promise<T>,
): Promise<T> {
  const { client, transport } = openClient(service, clientSettings(values, io));
  try {
    return await body(client);
  } finally {
    transport.close();
  }
}

/** Opens a generated client on the configured transport; `close` releases its connections. */
export function openClient<S extends DescService>(service: S, settings: ClientSettings): { client: Client<S>; transport: LanewayTransport } {
  const transport = createLanewayTransport({ baseUrl: settings.baseUrl, protocol: settings.protocol, token: settings.token });
  return { client: createClient(service, transport.transport), transport };
}

/** Prints a response message as protobuf JSON. */
export function printMessage<D extends DescMessage>(io: CliIo, schema: D, message: MessageShape<D>): void {
  io.stdout(toJsonString(schema, message, { prettySpaces: 2 }) + "\n");
}

/** Prints one message per line (for streams), compact. */
export function printLine<D extends DescMessage>(io: CliIo, schema: D, message: MessageShape<D>): void {
  io.stdout(toJsonString(schema, message) + "\n");
}

/** One line describing a failed call: code, reason and the server's message. */
export function describeFailure(error: ConnectError): string {
  const [detail] = error.findDetails(ErrorDetailSchema);
  const reason = detail?.reason ? ` (${detail.reason})` : "";
  return `${Code[error.code] ? codeName(error.code) : "unknown"}${reason}: ${error.rawMessage}`;
}

function codeName(code: Code): string {
  return Code[code]!.replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
}

/** Parses a positive or zero integer option into a bigint. */
export function parseUint(name: string, value: string | undefined, fallback?: bigint): bigint {
  if (value === undefined) {
    if (fallback === undefined) throw new UsageError(`--${name} is required`);
    return fallback;
  }
  if (!/^\d{1,20}$/.test(value)) throw new UsageError(`--${name} must be a non-negative integer`);
  return BigInt(value);
}

/** The positional arguments a command needs, by name, or a usage error. */
export function positionals(values: readonly string[], names: readonly string[]): string[] {
  if (values.length !== names.length) {
    throw new UsageError(names.length === 0 ? "this command takes no arguments" : `expected ${names.map((n) => `<${n}>`).join(" ")}`);
  }
  return [...values];
}
