/**
 * The state of an async job (`GET /v1/jobs/{id}`). Its own module, built on the wire types
 * alone, so that the errors (`JobWaitTimeoutError` holds a job) and the result helpers (which
 * throw errors) do not import each other.
 */

import type { DetectorError, DetectorResult } from "./wire.js";

/** The state of an async job, as `GET /v1/jobs/{id}` reports it. */
export interface JobStatus {
  id: string;
  state: "queued" | "running" | "done" | "failed";
  attempts: number;
  application_name: string;
  model_name: string;
  /** ISO 8601, UTC. */
  created_at: string;
  finished_at: string | null;
  /** Detector name to outcome once `state` is `done`. */
  result: { [detector: string]: DetectorResult | DetectorError } | null;
  error: string | null;
}
