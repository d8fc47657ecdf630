// Starts the Node reference server (@durable-streams/server), file-backed
// in the directory given, on a free loopback port, and prints its URL.
// The benchmark (go run ./test/bench/durable) runs it beside the broker.
//
//   node reference-server.mjs DATA_DIR [LONG_POLL_MS]
import { DurableStreamTestServer } from "@durable-streams/server"

const [dataDir, longPollMs] = process.argv.slice(2)
if (!dataDir) {
  console.error("usage: node reference-server.mjs DATA_DIR [LONG_POLL_MS]")
  process.exit(64)
}
const server = new DurableStreamTestServer({
  host: "127.0.0.1",
  port: 0,
  dataDir,
  longPollTimeout: Number(longPollMs ?? 500),
  compression: false,
})
const url = await server.start()
console.log(url)
const stop = async () => {
  await server.stop()
  process.exit(0)
}
process.on("SIGTERM", stop)
process.on("SIGINT", stop)
