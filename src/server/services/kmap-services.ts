import type { ServiceImpl } from "@connectrpc/connect";
import { KmapCommandService } from "../../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { KmapReadService } from "../../../gen/laneway/kmap/v1/kmap_read_service_pb.js";
import { notBuilt } from "../not-built.js";

const lane = "the Kmap command lane";

export const kmapCommandServiceImpl: ServiceImpl<typeof KmapCommandService> = {
  submitCommand() {
    throw notBuilt("kmap", `SubmitCommand of ${lane}`);
  },
  getCommand() {
    throw notBuilt("kmap", `GetCommand of ${lane}`);
  },
  listCommands() {
    throw notBuilt("kmap", `ListCommands of ${lane}`);
  },
  async *watchCommands() {
    throw notBuilt("kmap", `WatchCommands of ${lane}`);
  },
};

export const kmapReadServiceImpl: ServiceImpl<typeof KmapReadService> = {
  getNode() {
    throw notBuilt("kmap", `GetNode of ${lane}`);
  },
  listNodes() {
    throw notBuilt("kmap", `ListNodes of ${lane}`);
  },
  getTransaction() {
    throw notBuilt("kmap", `GetTransaction of ${lane}`);
  },
  listTransactions() {
    throw notBuilt("kmap", `ListTransactions of ${lane}`);
  },
  getSigningKey() {
    throw notBuilt("kmap", `GetSigningKey of ${lane}`);
  },
};
