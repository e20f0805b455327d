/**
 * The baseline for the server-overhead benchmark: a raw `node:http` JSON
 * handler doing the same work as LaneService.GetRegistry — authenticate the
 * bearer token in constant time against the configured tokens and answer
 * the project's registry view as JSON (built once per project, as
 * Laneway does) — with nothing of Connect.
 *
 * Usage: node --import tsx bench/baseline-registry-server.ts <lanes.json>
 * (tokens in the environment, as for laneway serve). Prints its URL.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import * as http from "node:http";
import { LaneRegistry, loadLanesConfig } from "../src/lanes/index.js";

const config = await loadLanesConfig(process.argv[2]!, process.env);
const registry = new LaneRegistry(config);
const known = [...config.tokens].map(([project, token]) => ({
  project,
  digest: createHash("sha256").update(token.reveal()).digest(),
}));

const answers = new Map<string, string>();

const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", () => {
    JSON.parse(Buffer.concat(chunks).toString("utf8") || "{}");
    const header = req.headers.authorization ?? "";
    const digest = createHash("sha256").update(header.replace(/^Bearer /, "")).digest();
    let project: string | undefined;
    for (const entry of known) if (timingSafeEqual(entry.digest, digest) && project === undefined) project = entry.project;
    if (project === undefined) {
      res.writeHead(401, { "content-type": "application/json" }).end('{"code":"unauthenticated"}');
      return;
    }
    let body = answers.get(project);
    if (body === undefined) {
      body = JSON.stringify(registry.viewFor(project));
      answers.set(project, body);
    }
    res.writeHead(200, { "content-type": "application/json" }).end(body);
  });
});
server.keepAliveTimeout = 5_000;
server.listen(0, "127.0.0.1", () => {
  const address = server.address() as { port: number };
  process.stdout.write(`listening on http://127.0.0.1:${address.port}\n`);
});
process.once("SIGTERM", () => server.close(() => process.exit(0)));
