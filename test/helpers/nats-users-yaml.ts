/**
 * An antoncore checkout's NATS users file (`users.yaml`, operator mode) as
 * the grant check and `laneway hive nats-trust` read it: each user with its
 * record and its publish and subscribe permissions, and the retired users.
 */

/** One user of the file. */
export interface YamlUser {
  readonly name: string;
  readonly publish: readonly string[];
  /** Written as `publish.deny` when given. */
  readonly publishDeny?: readonly string[];
  readonly subscribe: readonly string[];
}

/** A YAML block list of quoted subjects at `indent`. */
export const yamlList = (subjects: readonly string[], indent: string): string => subjects.map((s) => `${indent}- "${s}"`).join("\n");

/** The users file's text. */
export function usersYaml(users: readonly YamlUser[], retired: readonly string[] = []): string {
  return [
    "# NATS users of the swarm server (operator mode).",
    "users:",
    ...users.map((u) =>
      [
        `  - name: ${u.name}`,
        `    record: agentihooks/hub/nats-${u.name}`,
        "    permissions:",
        "      publish:",
        "        allow:",
        yamlList(u.publish, "          "),
        ...(u.publishDeny ? ["        deny:", yamlList(u.publishDeny, "          ")] : []),
        "      subscribe:",
        "        allow:",
        yamlList(u.subscribe, "          "),
      ].join("\n"),
    ),
    ...(retired.length === 0 ? [] : ["retired:", ...retired.map((r) => `  - name: ${r}\n    record: agentihooks/hub/nats-${r}`)]),
    "",
  ].join("\n");
}
