/**
 * Shapes of `/v2/detect` and `/v1/jobs/{id}` answers, and helpers to pick results out of them.
 */

import { DetectorFailedError, AssayError } from "./errors.js";
import type { DetectorError, DetectorResult } from "./wire.js";

/** What one detector contributed to a response item: a result, or (under
 * `mustCompute: "ignore_failures"`) an error object in its place. */
export type DetectorOutcome = DetectorResult | DetectorError;

/** The answer for an `asyncMode` item: the job to wait for with `client.jobs.wait` (or poll
 * with `client.jobs.retrieve`). */
export interface AsyncAccepted {
  message: string;
  status: number;
  job_id: string;
}

/** One response item: detector name to outcome, or the acceptance of an async item. */
export type DetectResponseItem = { [detector: string]: DetectorOutcome } | AsyncAccepted;

/** Whether a response item is the acceptance of an async item. */
export function isAsyncAccepted(item: DetectResponseItem): item is AsyncAccepted {
  return typeof (item as Partial<AsyncAccepted>).job_id === "string";
}

/** Whether a detector's outcome is an error object rather than a result. */
export function isDetectorError(outcome: DetectorOutcome): outcome is DetectorError {
  return (outcome as Partial<DetectorError>).error === true;
}

/**
 * One detector's result from a response item, for code that wants a score or an exception.
 *
 * @param item one element of what `detect` returned.
 * @param detector the detector's name, e.g. `output_relevance`.
 * @throws DetectorFailedError when the detector failed; AssayError when the item is an async
 *   acceptance or has no such detector.
 */
export function detectorResult(item: DetectResponseItem, detector: string): DetectorResult {
  if (isAsyncAccepted(item)) {
    throw new AssayError(
      `the item was queued as job ${item.job_id}; its result comes from client.jobs.wait (or client.jobs.retrieve)`,
    );
  }
  const outcome = item[detector];
  if (outcome === undefined) {
    const present = Object.keys(item).join(", ") || "none";
    throw new AssayError(
      `no result for detector ${JSON.stringify(detector)} (present: ${present})`,
    );
  }
  if (isDetectorError(outcome))
    throw new DetectorFailedError(detector, outcome.kind, outcome.message);
  return outcome;
}
