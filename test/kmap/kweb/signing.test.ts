import Database from "better-sqlite3";
import { createHash, createPublicKey, generateKeyPairSync } from "node:crypto";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { create } from "@bufbuild/protobuf";
import { CommandSchema } from "../../../gen/laneway/kmap/v1/command_pb.js";
import { canonicalCommand } from "../../../src/kmap/canonical-command.js";
import {
  EmbeddedKwebManager,
  KwebFailureError,
  KwebReader,
  loadOrCreateSigningKey,
  payloadDigest,
  verifyHistoryChain,
  verifyTransaction,
  ZERO_DIGEST,
  type KwebTransaction,
} from "../../../src/kmap/kweb/index.js";
import { command, commit, createNode, kwebPaths, type KwebPaths } from "./kweb-fixtures.js";

/**
 * Signed history: the key file, the signed payload, verification with the
 * public key alone, and the hash chain.
 */

describe("the signing key file", () => {
  test("is generated once, PKCS#8 PEM with mode 0600, and reused", () => {
    const paths = kwebPaths();
    try {
      const first = loadOrCreateSigningKey(paths.signingKeyPath);
      const pem = readFileSync(paths.signingKeyPath, "utf8");
      expect(pem).toMatch(/^-----BEGIN PRIVATE KEY-----\n/);
      expect(statSync(paths.signingKeyPath).mode & 0o777).toBe(0o600);
      const second = loadOrCreateSigningKey(paths.signingKeyPath);
      expect(readFileSync(paths.signingKeyPath, "utf8")).toBe(pem);
      expect(second.keyId).toBe(first.keyId);
      expect(first.publicKey).toHaveLength(32);
      expect(first.keyId).toBe(createHash("sha256").update(first.publicKey).digest("hex").slice(0, 32));
      const fromPem = createPublicKey(first.publicKeyPem).export({ format: "jwk" });
      expect(Buffer.from(fromPem.x!, "base64url")).toEqual(Buffer.from(first.publicKey));
      // No temporary file is left behind.
      expect(readdirSync(dirname(paths.signingKeyPath))).toEqual(["signing-key.pem"]);
    } finally {
      paths.remove();
    }
  });

  test("managers starting at once on an empty data directory end up with one key", async () => {
    const paths = kwebPaths();
    const managers = Array.from(
      { length: 4 },
      (_, i) => new EmbeddedKwebManager({ databasePath: `${paths.dir}/kweb-${i}.sqlite`, signingKeyPath: paths.signingKeyPath }),
    );
    try {
      await Promise.all(managers.map((m) => m.ready()));
      const keyIds = new Set(managers.map((m) => m.signingKey().keyId));
      expect(keyIds.size).toBe(1);
      expect(loadOrCreateSigningKey(paths.signingKeyPath).keyId).toBe([...keyIds][0]);
      expect(readdirSync(dirname(paths.signingKeyPath)).filter((f) => f.includes("signing-key"))).toEqual(["signing-key.pem"]);
    } finally {
      await Promise.all(managers.map((m) => m.close()));
      paths.remove();
    }
  });

  test("a restarted manager keeps the key and the reader serves it", async () => {
    const paths = kwebPaths();
    try {
      const first = await EmbeddedKwebManager.open({ databasePath: paths.databasePath, signingKeyPath: paths.signingKeyPath });
      const keyId = first.signingKey().keyId;
      await first.close();
      const second = await EmbeddedKwebManager.open({ databasePath: paths.databasePath, signingKeyPath: paths.signingKeyPath });
      const reader = KwebReader.open(paths.databasePath);
      expect(second.signingKey().keyId).toBe(keyId);
      expect(reader.signingKey()).toEqual(second.signingKey());
      expect(reader.signingKey().algorithm).toBe("ed25519");
      reader.close();
      await second.close();
    } finally {
      paths.remove();
    }
  });

  test("an unreadable or non-Ed25519 key file makes ready() fail with a typed error", async () => {
    const paths = kwebPaths();
    try {
      loadOrCreateSigningKey(paths.signingKeyPath);
      writeFileSync(paths.signingKeyPath, "not a key\n");
      const garbage = new EmbeddedKwebManager({ databasePath: paths.databasePath, signingKeyPath: paths.signingKeyPath });
      const error = await garbage.ready().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(KwebFailureError);
      expect(error).toMatchObject({ failure: "signing_key_invalid", reason: "internal" });
      expect((error as Error).message).not.toContain(paths.dir);
      await garbage.close();

      const rsa = generateKeyPairSync("rsa", { modulusLength: 1024 }).privateKey.export({ type: "pkcs8", format: "pem" });
      writeFileSync(paths.signingKeyPath, rsa);
      const wrongKind = new EmbeddedKwebManager({ databasePath: paths.databasePath, signingKeyPath: paths.signingKeyPath });
      await expect(wrongKind.ready()).rejects.toMatchObject({ failure: "signing_key_invalid", message: expect.stringContaining("not an Ed25519 key") });
      await wrongKind.close();
    } finally {
      paths.remove();
    }
  });
});

describe("signed transactions", () => {
  let paths: KwebPaths;
  let reader: KwebReader;
  let history: KwebTransaction[];
  let publicKey: Uint8Array;
  let publicKeyPem: string;

  beforeAll(async () => {
    paths = kwebPaths();
    const manager = await EmbeddedKwebManager.open({ databasePath: paths.databasePath, signingKeyPath: paths.signingKeyPath });
    const a = await createNode(manager, { title: "a", attributes: { z: "1", a: "2" } });
    const b = await createNode(manager, { title: "b", parentId: a });
    await commit(manager, command.linkNodes(b, a, "cites"));
    await commit(manager, command.updateNode(a, { title: "A", removeAttributes: ["z"] }));
    await commit(manager, command.unlinkNodes(b, a, "cites"));
    await commit(manager, command.moveNode(b));
    await commit(manager, command.deleteNode(b));
    publicKey = manager.signingKey().publicKey;
    publicKeyPem = manager.signingKey().publicKeyPem;
    await manager.close();
    reader = KwebReader.open(paths.databasePath);
    history = [...reader.listTransactions({ limit: 100 }).transactions];
  });

  afterAll(() => {
    reader?.close();
    paths?.remove();
  });

  test("the signed payload is the canonical JSON of the transaction's fields", () => {
    expect(history).toHaveLength(7);
    for (const [i, transaction] of history.entries()) {
      const text = Buffer.from(transaction.signedPayload).toString("utf8");
      const payload = JSON.parse(text) as Record<string, unknown>;
      expect(Object.keys(payload)).toEqual([...Object.keys(payload)].sort());
      expect(payload).toEqual({
        schema: "laneway-kmap-transaction-v1",
        id: transaction.id,
        sequence: i + 1,
        provenance: transaction.provenance,
        command: JSON.parse(canonicalCommand(transaction.command)),
        touched_node_ids: [...transaction.touchedNodeIds].sort(),
        created_node_id: transaction.createdNodeId ?? "",
        committed_at: new Date(transaction.committedAt).toISOString(),
        key_id: transaction.keyId,
        previous_digest: i === 0 ? ZERO_DIGEST : createHash("sha256").update(history[i - 1]!.signedPayload).digest("hex"),
      });
      expect(payload["committed_at"]).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      expect(transaction.signature).toHaveLength(64);
    }
    expect(history[0]!.previousDigest).toBe("0".repeat(64));
    expect(history[1]!.previousDigest).toBe(payloadDigest(history[0]!.signedPayload));
  });

  test("every transaction verifies with the raw public key or its PEM", () => {
    for (const transaction of history) {
      expect(verifyTransaction(transaction, publicKey)).toEqual({ valid: true });
      expect(verifyTransaction(transaction, publicKeyPem)).toEqual({ valid: true });
      expect(verifyTransaction(transaction, reader.signingKey())).toEqual({ valid: true });
    }
  });

  test("another key does not verify", () => {
    const other = generateKeyPairSync("ed25519").publicKey;
    expect(verifyTransaction(history[0]!, other.export({ type: "spki", format: "pem" }).toString())).toMatchObject({ valid: false });
    const raw = Buffer.from(other.export({ format: "jwk" }).x!, "base64url");
    expect(verifyTransaction(history[0]!, raw)).toMatchObject({ valid: false, reason: expect.stringContaining("signed by key") });
    // Even with the key id forged to match the other key, the signature does not hold.
    const forged = { ...history[0]!, keyId: createHash("sha256").update(raw).digest("hex").slice(0, 32) };
    expect(verifyTransaction(forged, raw)).toMatchObject({ valid: false, reason: expect.stringContaining("signature") });
  });

  test("a tampered payload, signature or field fails", () => {
    const original = history[2]!;
    const flip = (bytes: Uint8Array, at: number): Uint8Array => {
      const copy = new Uint8Array(bytes);
      copy[at] = copy[at]! ^ 0x01;
      return copy;
    };
    const tampered: Array<[string, KwebTransaction]> = [
      ["payload byte", { ...original, signedPayload: flip(original.signedPayload, 40) }],
      ["signature byte", { ...original, signature: flip(original.signature, 10) }],
      ["id", { ...original, id: "ab".repeat(16) }],
      ["sequence", { ...original, sequence: original.sequence + 1 }],
      ["provenance", { ...original, provenance: "cd".repeat(16) }],
      ["command", { ...original, command: create(CommandSchema, { operation: { case: "deleteNode", value: { nodeId: "ef".repeat(16) } } }) }],
      ["touched nodes", { ...original, touchedNodeIds: original.touchedNodeIds.slice(1) }],
      ["created node", { ...original, createdNodeId: "12".repeat(16) }],
      ["committed at", { ...original, committedAt: original.committedAt + 1 }],
      ["key id", { ...original, keyId: "34".repeat(16) }],
      ["previous digest", { ...original, previousDigest: ZERO_DIGEST }],
    ];
    for (const [what, transaction] of tampered) {
      expect(verifyTransaction(transaction, publicKey), what).toMatchObject({ valid: false, reason: expect.any(String) });
    }
  });

  test("a payload re-signed with the right key but saying something else still fails the field check", () => {
    // Swapping in another transaction's payload and signature: the signature holds, the fields do not match.
    const original = history[2]!;
    const swapped = { ...original, signedPayload: history[3]!.signedPayload, signature: history[3]!.signature };
    expect(verifyTransaction(swapped, publicKey)).toMatchObject({ valid: false, reason: expect.stringContaining("differs from its signed payload") });
  });

  test("the history chain verifies, and a removed or reordered transaction breaks it", () => {
    expect(verifyHistoryChain(history)).toEqual({ valid: true });
    expect(verifyHistoryChain(history.slice(2))).toEqual({ valid: true });
    expect(verifyHistoryChain([...history.slice(0, 3), ...history.slice(4)])).toMatchObject({ valid: false });
    expect(verifyHistoryChain([history[1]!, history[0]!, ...history.slice(2)])).toMatchObject({ valid: false });
    expect(verifyHistoryChain(history.slice(1).map((t) => ({ ...t, sequence: t.sequence - 1 })))).toMatchObject({
      valid: false,
      reason: expect.stringContaining("first"),
    });
  });

  test("a transaction deleted from the Kweb file breaks the chain read back from it", () => {
    const copy = `${paths.dir}/tampered.sqlite`;
    const source = new Database(paths.databasePath, { readonly: true });
    return source.backup(copy).then(() => {
      source.close();
      const db = new Database(copy);
      db.pragma("foreign_keys = OFF");
      db.prepare("DELETE FROM transaction_nodes WHERE sequence = 3").run();
      db.prepare("DELETE FROM transactions WHERE sequence = 3").run();
      db.close();
      const tamperedReader = KwebReader.open(copy);
      const tampered = tamperedReader.listTransactions({ limit: 100 }).transactions;
      tamperedReader.close();
      expect(tampered).toHaveLength(6);
      // Each remaining transaction still verifies on its own; only the chain shows the gap.
      for (const transaction of tampered) expect(verifyTransaction(transaction, publicKey)).toEqual({ valid: true });
      expect(verifyHistoryChain(tampered)).toMatchObject({ valid: false });
    });
  });
});
