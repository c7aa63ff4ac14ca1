/**
 * The camelCase shapes `client.detect` accepts, and their mapping to the wire's snake_case
 * `DetectRequestItem`.
 */

import { AssayError } from "./errors.js";
import type { DetectorConfig, DetectRequestItem } from "./wire.js";

/** Detector name (e.g. `output_relevance`, `completeness`) to its options. */
export type DetectConfig = { [detector: string]: DetectorConfig };

/** Everything in a request item except the texts and config, for the positional form. */
export interface DetectOptions {
  /** Accepted for source compatibility only: Assay's detectors judge their own published
   * instructions, and the server rejects any value but null (422 naming `[i].instructions`). */
  instructions?: string | string[] | null;
  /** Store the result on the server (needs `applicationName` and `modelName` to group it). */
  publish?: boolean;
  /** Queue the item and answer at once with a `job_id` (see `client.jobs.wait` and
   * `client.jobs.retrieve`). */
  asyncMode?: boolean;
  /** Application the published result belongs to. */
  applicationName?: string | null;
  /** Model the published result belongs to. */
  modelName?: string | null;
  /** `all_or_none` (default): a failed detector fails the request; `ignore_failures`: it
   * yields an error object in its place. */
  mustCompute?: "all_or_none" | "ignore_failures";
}

/** One item in camelCase, as in the published examples. */
export interface DetectParams extends DetectOptions {
  /** The response being judged. */
  generatedText: string;
  /** The question the response answers. */
  userQuery?: string | null;
  /** Background documents: one string or a list. */
  context?: string | string[] | null;
  /** Which detectors to run, e.g. `{ completeness: { detector_name: "default" } }`. */
  config: DetectConfig;
}

/** `userQuery` -> `user_query`; snake_case keys pass through unchanged. */
export function snakeCase(key: string): string {
  return key.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);
}

/**
 * The wire item for camelCase parameters. Keys are renamed only at the top level: `config`
 * holds detector names and their options, which are already the wire's. Unknown keys are
 * renamed the same way and left for the server to reject by name.
 *
 * @param params the item in camelCase (snake_case keys are accepted too).
 * @throws AssayError when two keys name the same field (`generatedText` and `generated_text`).
 */
export function toRequestItem(params: DetectParams): DetectRequestItem {
  if (typeof params !== "object" || params === null || Array.isArray(params)) {
    throw new AssayError(
      `detect: expected an object like { generatedText, userQuery, config }, got ${
        params === null ? "null" : Array.isArray(params) ? "an array" : typeof params
      }`,
    );
  }
  const item: Record<string, unknown> = {};
  const givenAs: Record<string, string> = {};
  for (const [key, value] of Object.entries(params)) {
    if (value === undefined) continue;
    const wire = snakeCase(key);
    // `generatedText` and `generated_text` are one field: which one should win is a guess.
    const earlier = givenAs[wire];
    if (earlier !== undefined) {
      throw new AssayError(
        `detect: ${JSON.stringify(earlier)} and ${JSON.stringify(key)} are the same field ` +
          `(${wire}); give only one`,
      );
    }
    givenAs[wire] = key;
    item[wire] = value;
  }
  return item as unknown as DetectRequestItem;
}
