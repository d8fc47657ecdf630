// The Durable Streams conformance suite, run by vitest against the server
// at CONFORMANCE_TEST_URL (run.sh starts the broker and sets it).
import { runConformanceTests } from "@durable-streams/server-conformance-tests"

runConformanceTests({
  baseUrl: process.env.CONFORMANCE_TEST_URL,
  longPollTimeoutMs: Number(process.env.CONFORMANCE_LONG_POLL_MS ?? 500),
  subscriptions: false,
})
