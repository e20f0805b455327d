import { execFile } from "node:child_process";
import { access, constants, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, test } from "vitest";
import { repoRoot, startLanewayInProcess, type InProcessLaneway } from "../helpers/laneway.js";

/**
 * A Python gRPC client, generated at test time from the current proto/ with
 * Debian's protoc and grpc_python_plugin exactly as docs/clients.md says,
 * runs test/clients/python/scenario.py against a real Laneway over gRPC
 * (h2c, the same port as everything else): health, the registry, a Kmap
 * command watched to Committed, error details decoded from the trailers
 * (also of answers given before any message is read: a missing token, a
 * method that does not exist, a body that does not parse), and transaction
 * signatures verified from docs/kmap.md's description alone.
 *
 * The scenario prints one JSON summary; each test below asserts one step.
 */

const run = promisify(execFile);

const PYTHON = "/usr/bin/python3";
const PROTOC = "/usr/bin/protoc";
const GRPC_PYTHON_PLUGIN = "/usr/bin/grpc_python_plugin";
const scenarioDir = join(repoRoot, "test/clients/python");

/** Fails (never skips) when the Debian tools are missing. */
async function requireTools(): Promise<void> {
  const missing: string[] = [];
  for (const path of [PYTHON, PROTOC, GRPC_PYTHON_PLUGIN]) {
    await access(path, constants.X_OK).catch(() => missing.push(path));
  }
  if (missing.length > 0) {
    throw new Error(
      `missing ${missing.join(", ")}: run .ci/run, which installs them ` +
        "(apt-get install -y python3-grpcio protobuf-compiler protobuf-compiler-grpc python3-cryptography)",
    );
  }
  const modules = "import grpc, google.protobuf, cryptography.hazmat.primitives.asymmetric.ed25519";
  await run(PYTHON, ["-c", modules]).catch((error: { stderr?: string }) => {
    throw new Error(`${PYTHON} cannot import grpc, protobuf and cryptography (run .ci/run): ${error.stderr ?? String(error)}`);
  });
}

async function protoFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries
    .filter((e) => e.isFile() && e.name.endsWith(".proto"))
    .map((e) => relative(dir, join(e.parentPath, e.name)))
    .sort();
}

/** The command of docs/clients.md: every file under proto/, plus what they and the scenario import. */
async function generatePythonClient(out: string): Promise<void> {
  const laneway = await protoFiles(join(repoRoot, "proto"));
  await run(
    PROTOC,
    [
      "-I",
      "proto",
      "-I",
      "third_party/proto",
      "-I",
      "laneway_grpc=third_party/proto/grpc",
      "-I",
      "test/clients/python/proto",
      `--python_out=${out}`,
      `--grpc_python_out=${out}`,
      `--plugin=protoc-gen-grpc_python=${GRPC_PYTHON_PLUGIN}`,
      ...laneway,
      "buf/validate/validate.proto",
      "laneway_grpc/health/v1/health.proto",
      "google/rpc/status.proto",
    ],
    { cwd: repoRoot },
  ).catch((error: { stderr?: string }) => {
    throw new Error(`protoc failed: ${error.stderr ?? String(error)}`);
  });
}

/** The worked example of docs/kmap.md ("### Worked example"): key, transaction and the two payload texts. */
async function docExample(): Promise<Record<string, unknown>> {
  const markdown = await readFile(join(repoRoot, "docs/kmap.md"), "utf8");
  const start = markdown.indexOf("\n### Worked example\n");
  expect(start, "docs/kmap.md has a '### Worked example' section").toBeGreaterThan(0);
  const end = markdown.indexOf("\n## ", start);
  const section = markdown.slice(start, end === -1 ? undefined : end);
  const blocks = [...section.matchAll(/^```(\w*)\n([\s\S]*?)\n```$/gm)].map((m) => ({ info: m[1], body: m[2]! }));
  const json = blocks.filter((b) => b.info === "json").map((b) => JSON.parse(b.body) as unknown);
  const text = blocks.filter((b) => b.info === "text").map((b) => b.body);
  expect(json.length, "the worked example shows the key and the transaction").toBe(2);
  expect(text.length, "the worked example shows two signed payloads").toBe(2);
  return { key: json[0], transaction: json[1], payload: text[0], previous_payload: text[1] };
}

interface ErrorOutcome {
  code: string;
  message?: string;
  has_status_details: boolean;
  status_code?: number;
  status_code_matches?: boolean;
  status_message_matches?: boolean;
  detail_types?: string[];
  reason?: string;
  domain?: string;
  violations?: { field: string; rule_id: string }[];
}

interface Checks {
  key_id_matches: boolean;
  rebuilt_equals_signed: boolean;
  signature_valid: boolean;
  touched_sorted: boolean;
  valid: boolean;
}

interface Summary {
  health: Record<string, string>;
  registry: { project: string; namespace: string; lanes: { lane: string; owner: string; publish: boolean; subscribe: boolean }[] };
  commands: {
    idempotency_id: string;
    submitted_state: string;
    events: string[];
    state: string;
    transaction_id: string;
    created_node_id: string;
    error: string;
  }[];
  unauthenticated: ErrorOutcome;
  unauthenticated_missing: ErrorOutcome;
  unimplemented: { method_without_token: ErrorOutcome; method_with_token: ErrorOutcome; service: ErrorOutcome };
  malformed_body: ErrorOutcome;
  invalid: ErrorOutcome;
  signing_key: { algorithm: string; public_key_length: number; key_id_matches_public_key: boolean; pem_matches_public_key: boolean };
  verify: (Checks & {
    provenance_matches: boolean;
    created_node_matches: boolean;
    touched: number;
    signed_payload: string;
    tampered_rejected: { field: boolean; signature: boolean; payload: boolean };
  })[];
  chain: { valid: boolean; problems: string[]; sequences: number[]; all_valid: boolean; gap_detected: boolean };
  doc_example: Checks & {
    rebuilt_equals_doc_text: boolean;
    previous_digest_matches_doc_text: boolean;
    key_id_matches_public_key: boolean;
    pem_matches_public_key: boolean;
  };
}

describe("a Python gRPC client generated from proto/", () => {
  let scratch: string | undefined;
  let laneway: InProcessLaneway | undefined;
  let pending: Promise<Summary> | undefined;

  /**
   * Generates the client, starts Laneway and runs the scenario, once. Every
   * test awaits it, so a missing tool or a failed run fails each test with
   * its cause instead of skipping it.
   */
  function scenario(): Promise<Summary> {
    pending ??= (async () => {
      await requireTools();
      scratch = await mkdtemp(join(tmpdir(), "laneway-python-"));
      const out = join(scratch, "gen");
      await mkdir(out);
      await generatePythonClient(out);
      const examplePath = join(scratch, "doc-example.json");
      await writeFile(examplePath, JSON.stringify(await docExample()));

      laneway = await startLanewayInProcess();
      const target = new URL(laneway.url).host;
      // Tokens travel in the environment, never in arguments or output.
      const { stdout } = await run(PYTHON, [join(scenarioDir, "scenario.py"), "--target", target, "--doc-example", examplePath], {
        cwd: scratch,
        env: {
          PATH: process.env.PATH ?? "/usr/bin:/bin",
          HOME: scratch,
          PYTHONPATH: `${out}:${scenarioDir}`,
          PYTHONDONTWRITEBYTECODE: "1",
          LANEWAY_ATLAS_TOKEN: laneway.tokens.atlas,
          LANEWAY_ADMIN_TOKEN: laneway.tokens.admin,
        },
      }).catch((error: { stderr?: string }) => {
        throw new Error(`the Python scenario failed: ${error.stderr ?? String(error)}`);
      });
      return JSON.parse(stdout) as Summary;
    })();
    return pending;
  }

  afterAll(async () => {
    await laneway?.stop();
    if (scratch) await rm(scratch, { recursive: true, force: true });
  });

  test("the generated modules include every file under proto/, outside the grpcio package", async () => {
    await scenario();
    const out = join(scratch!, "gen");
    const generated = (await readdir(out, { recursive: true })).filter((f) => f.endsWith(".py")).sort();
    for (const proto of await protoFiles(join(repoRoot, "proto"))) {
      expect(generated).toContain(proto.replace(/\.proto$/, "_pb2.py"));
    }
    expect(generated).toContain("laneway_grpc/health/v1/health_pb2_grpc.py");
    expect(generated).toContain("google/rpc/status_pb2.py");
    expect(generated.filter((f) => f.startsWith("grpc/"))).toEqual([]);
  });

  test("grpc.health.v1 Check answers SERVING for the server and the Kmap command service", async () => {
    const summary = await scenario();
    expect(summary.health).toEqual({ "(server)": "SERVING", "laneway.kmap.v1.KmapCommandService": "SERVING" });
  });

  test("GetRegistry with the atlas project token in the Authorization metadata", async () => {
    const summary = await scenario();
    expect(summary.registry).toMatchObject({ project: "atlas", lanes: [{ lane: "measurements", owner: "atlas", publish: true, subscribe: true }] });
  });

  test("SubmitCommand of create_node, then WatchCommands until the record is COMMITTED", async () => {
    const summary = await scenario();
    const [topic] = summary.commands;
    expect(topic).toMatchObject({
      submitted_state: "COMMAND_STATE_QUEUED",
      events: ["COMMAND_EVENT_KIND_QUEUED", "COMMAND_EVENT_KIND_APPLYING", "COMMAND_EVENT_KIND_COMMITTED"],
      state: "COMMAND_STATE_COMMITTED",
    });
    expect(topic!.transaction_id).toMatch(/^[0-9a-f]{32}$/);
    expect(topic!.created_node_id).toMatch(/^[0-9a-f]{32}$/);
  });

  test("every command of the scenario commits (create with tricky text, update with an empty optional, link)", async () => {
    const summary = await scenario();
    expect(summary.commands.map((c) => [c.state, c.error])).toEqual(Array(4).fill(["COMMAND_STATE_COMMITTED", ""]));
  });

  test("an unknown token: UNAUTHENTICATED, and grpc-status-details-bin decodes to google.rpc.Status with ErrorDetail unauthorized/lanes", async () => {
    const summary = await scenario();
    expect(summary.unauthenticated).toMatchObject({
      code: "UNAUTHENTICATED",
      has_status_details: true,
      status_code: 16,
      status_code_matches: true,
      status_message_matches: true,
      detail_types: ["type.googleapis.com/laneway.errors.v1.ErrorDetail"],
      reason: "unauthorized",
      domain: "lanes",
    });
  });

  test("no token at all: UNAUTHENTICATED before the first message, with its ErrorDetail", async () => {
    const summary = await scenario();
    expect(summary.unauthenticated_missing).toMatchObject({
      code: "UNAUTHENTICATED",
      message: "missing bearer token: send Authorization: Bearer <token>",
      has_status_details: true,
      status_code: 16,
      status_code_matches: true,
      status_message_matches: true,
      detail_types: ["type.googleapis.com/laneway.errors.v1.ErrorDetail"],
      reason: "unauthorized",
      domain: "lanes",
    });
  });

  test("a method or service that does not exist: grpcio reads UNIMPLEMENTED from the trailers-only answer, with and without a token", async () => {
    const summary = await scenario();
    const expected = {
      code: "UNIMPLEMENTED",
      message: "no such RPC: check the service and method name (laneway lists its services through gRPC reflection)",
      has_status_details: true,
      status_code: 12,
      status_code_matches: true,
      status_message_matches: true,
      detail_types: ["type.googleapis.com/laneway.errors.v1.ErrorDetail"],
      reason: "unimplemented",
      domain: "server",
    };
    expect(summary.unimplemented.method_without_token).toMatchObject(expected);
    expect(summary.unimplemented.method_with_token).toMatchObject(expected);
    expect(summary.unimplemented.service).toMatchObject(expected);
  });

  test("a body that is no message of the method: INVALID_ARGUMENT before the first message, with its ErrorDetail", async () => {
    const summary = await scenario();
    expect(summary.malformed_body).toMatchObject({
      code: "INVALID_ARGUMENT",
      message: "the request body is not a valid grpc.health.v1.HealthCheckRequest in the protobuf binary format",
      has_status_details: true,
      status_code: 3,
      status_code_matches: true,
      status_message_matches: true,
      detail_types: ["type.googleapis.com/laneway.errors.v1.ErrorDetail"],
      reason: "invalid_argument",
      domain: "server",
    });
  });

  test("an invalid command: INVALID_ARGUMENT with buf.validate.Violations and ErrorDetail invalid_input/kmap", async () => {
    const summary = await scenario();
    expect(summary.invalid).toMatchObject({
      code: "INVALID_ARGUMENT",
      has_status_details: true,
      status_code: 3,
      status_code_matches: true,
      detail_types: ["type.googleapis.com/buf.validate.Violations", "type.googleapis.com/laneway.errors.v1.ErrorDetail"],
      reason: "invalid_input",
      domain: "kmap",
      violations: [{ field: "command.delete_node.node_id", rule_id: "laneway.node_id" }],
    });
  });

  test("GetSigningKey: a raw Ed25519 key whose SHA-256 prefix is the key id and whose PEM is the same key", async () => {
    const summary = await scenario();
    expect(summary.signing_key).toEqual({
      algorithm: "ed25519",
      public_key_length: 32,
      key_id_matches_public_key: true,
      pem_matches_public_key: true,
    });
  });

  test("each committed transaction verifies in Python from docs/kmap.md alone: rebuilt bytes equal signed_payload, the signature holds", async () => {
    const summary = await scenario();
    expect(summary.verify).toHaveLength(4);
    for (const checks of summary.verify) {
      expect(checks, checks.signed_payload).toMatchObject({
        key_id_matches: true,
        rebuilt_equals_signed: true,
        signature_valid: true,
        touched_sorted: true,
        valid: true,
        provenance_matches: true,
        created_node_matches: true,
        tampered_rejected: { field: true, signature: true, payload: true },
      });
    }
    // The link touched both of its nodes.
    expect(summary.verify.map((c) => c.touched)).toEqual([1, 1, 1, 2]);
  });

  test("the signed bytes use proto field names, keep an explicitly empty optional and a number sequence", async () => {
    const summary = await scenario();
    const [, river, update] = summary.verify.map((c) => c.signed_payload);
    expect(river).toContain('"create_node":{"attributes":{"a_first":"ü","basin":"north-sea","empty":"","region":"alps"}');
    expect(river).toContain('"parent_id":"');
    expect(river).toContain(String.raw`"title":"Rhine – \"Rhein\" \\ <&> ` + "\u2028 \u{1F30A}\"");
    expect(river).toContain(String.raw`"body":"Source: Lake Toma\n\ttab \u0001 \u001f ` + "\u007f /\"");
    expect(river).toContain('"sequence":2,');
    expect(update).toContain('{"update_node":{"body":"","node_id":"');
    expect(update).toContain('"remove_attributes":["region","a_first"]');
  });

  test("the whole history chains: sequences 1..n, zero digest first, each previous_digest the SHA-256 of the payload before", async () => {
    const summary = await scenario();
    expect(summary.chain).toEqual({ valid: true, problems: [], sequences: [1, 2, 3, 4], all_valid: true, gap_detected: true });
  });

  test("the worked example of docs/kmap.md verifies and its payload texts are exact", async () => {
    const summary = await scenario();
    expect(summary.doc_example).toEqual({
      key_id_matches: true,
      rebuilt_equals_signed: true,
      signature_valid: true,
      touched_sorted: true,
      valid: true,
      rebuilt_equals_doc_text: true,
      previous_digest_matches_doc_text: true,
      key_id_matches_public_key: true,
      pem_matches_public_key: true,
    });
  });
});
