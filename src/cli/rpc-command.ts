import type { ParseArgsConfig } from "node:util";
import type { DescMethodServerStreaming, DescMethodUnary, MessageInitShape, MessageShape } from "@bufbuild/protobuf";
import { nanosToMillis, parseGoDuration } from "../config/index.js";
import { parseCommand, parseUint, printLine, printMessage, UsageError, withClient, type CliIo } from "./command.js";
import type { CommandSpec } from "./command-group.js";

/**
 * One CLI command per RPC, in one shape: the command parses its positional
 * arguments and options, builds the request, calls the method through the
 * generated client, and prints the answer with the method's own output
 * schema (pretty JSON for a unary answer, one compact JSON line per message
 * of a server stream). A new RPC's command is its usage line, its options
 * and a request builder.
 */

type OptionValues = Readonly<Record<string, string | boolean | (string | boolean)[] | undefined>>;

/** What a request builder reads: named positionals and typed option accessors. */
export interface RpcInput {
  readonly io: CliIo;
  /** A positional argument by the name given in `args` ("" for an optional one not given). */
  arg(name: string): string;
  /** The values of a variadic positional (`"key..."` in `args`). */
  rest(): readonly string[];
  /** A string option, or undefined. */
  string(name: string): string | undefined;
  /** A string option that must be present. */
  required(name: string): string;
  /** A repeatable string option (empty when absent). */
  list(name: string): string[];
  /** A boolean option. */
  flag(name: string): boolean;
  /** A non-negative integer option. */
  uint(name: string, fallback?: bigint): bigint;
  /** A Go duration option in milliseconds (0 when absent). */
  durationMs(name: string): number;
}

type Method = DescMethodUnary | DescMethodServerStreaming;

export interface RpcCommandSpec<M extends Method> {
  /** The generated method descriptor, e.g. `LaneService.method.publish`. */
  readonly method: M;
  /** The usage line after the group name; its first word is the command's name. */
  readonly usage: string;
  readonly summary: string;
  /**
   * Positional argument names, in order. A name ending in `?` is optional
   * (only at the end); a last name ending in `...` takes the rest (at least
   * one).
   */
  readonly args?: readonly string[];
  readonly options?: ParseArgsConfig["options"];
  /** Builds the request. */
  request(input: RpcInput): MessageInitShape<M["input"]> | Promise<MessageInitShape<M["input"]>>;
  /** Handles the answer (each message of a stream) instead of printing it. */
  handle?(response: MessageShape<M["output"]>, input: RpcInput): void | Promise<void>;
}

export function rpcCommand<M extends Method>(spec: RpcCommandSpec<M>): CommandSpec {
  const name = spec.usage.split(/\s/, 1)[0]!;
  return {
    name,
    usage: spec.usage,
    summary: spec.summary,
    async run(argv, io) {
      const { values, positionals } = parseCommand(argv, spec.options ?? {});
      const input = rpcInput(values as OptionValues, positionals, spec.args ?? [], io);
      const request = await spec.request(input);
      const { method } = spec;
      await withClient(method.parent, values, io, async (client) => {
        const call = (client as unknown as Record<string, (req: unknown, options: { signal: AbortSignal }) => unknown>)[method.localName]!;
        if (method.methodKind === "server_streaming") {
          for await (const message of call(request, { signal: io.signal }) as AsyncIterable<MessageShape<M["output"]>>) {
            if (spec.handle) await spec.handle(message, input);
            else printLine(io, method.output, message);
          }
          return;
        }
        const response = (await call(request, { signal: io.signal })) as MessageShape<M["output"]>;
        if (spec.handle) await spec.handle(response, input);
        else printMessage(io, method.output, response);
      });
    },
  };
}

function rpcInput(values: OptionValues, positionals: readonly string[], names: readonly string[], io: CliIo): RpcInput {
  const variadic = names.at(-1)?.endsWith("...") ?? false;
  const fixed = (variadic ? names.slice(0, -1) : names).map((n) => n.replace(/\?$/, ""));
  const required = names.filter((n) => !n.endsWith("?")).length;
  const shape = names.map((n) => (n.endsWith("?") ? `[${n.slice(0, -1)}]` : `<${n}>`)).join(" ");
  const tooMany = !variadic && positionals.length > fixed.length;
  if (positionals.length < required || tooMany) {
    throw new UsageError(names.length === 0 ? "this command takes no arguments" : `expected ${shape}`);
  }
  const string = (name: string): string | undefined => {
    const value = values[name];
    return typeof value === "string" ? value : undefined;
  };
  return {
    io,
    arg(name) {
      const index = fixed.indexOf(name);
      if (index === -1) throw new Error(`the command declares no argument ${name}`);
      return positionals[index] ?? "";
    },
    rest: () => positionals.slice(fixed.length),
    string,
    required(name) {
      const value = string(name);
      if (value === undefined) throw new UsageError(`--${name} is required`);
      return value;
    },
    list(name) {
      const value = values[name];
      return Array.isArray(value) ? value.filter((v): v is string => typeof v === "string") : [];
    },
    flag: (name) => values[name] === true,
    uint: (name, fallback) => parseUint(name, string(name), fallback),
    durationMs(name) {
      const value = string(name);
      if (value === undefined) return 0;
      try {
        return nanosToMillis(parseGoDuration(value));
      } catch {
        throw new UsageError(`--${name} must be a duration such as 10s`);
      }
    },
  };
}
