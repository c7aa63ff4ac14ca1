/**
 * TypeScript client for the Assay server: `import Client from "@assay/client"`.
 */

import { Client } from "./client.js";

export {
  Client,
  Inference,
  Jobs,
  DEFAULT_BASE_URL,
  DEFAULT_JOB_POLL_INTERVAL_MS,
  DEFAULT_JOB_WAIT_TIMEOUT_MS,
  DEFAULT_MAX_RETRIES,
  DEFAULT_TIMEOUT_MS,
} from "./client.js";
export type { ClientOptions, JobWaitOptions } from "./client.js";
// Every error class, JobWaitTimeoutError (thrown by `client.jobs.wait`) included, and
// ErrorBody (the generated one, with the `failure` the schema does not list).
export * from "./errors.js";
export type { DetectConfig, DetectOptions, DetectParams } from "./params.js";
export { toRequestItem } from "./params.js";
export { detectorResult, isAsyncAccepted, isDetectorError } from "./results.js";
export type { JobStatus } from "./jobs.js";
export type { AsyncAccepted, DetectorOutcome, DetectResponseItem } from "./results.js";
export { isRetryableStatus, retryAfterMs, retryDelayMs } from "./retry.js";
export type { RequestOptions } from "./transport.js";
export type {
  DetectorConfig,
  DetectorError,
  DetectorResult,
  DetectRequestItem,
  InstructionResult,
} from "./wire.js";

export { WIRE_FIELDS } from "./wire.js";

export default Client;
