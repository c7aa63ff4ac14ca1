/**
 * A tiny loopback HTTP server for fault injection (429s, 5xx, resets, silence), recording what
 * the client sent. The happy path is tested against the real server instead.
 */

import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/** One request the stub received. */
export interface Received {
  method: string;
  path: string;
  headers: IncomingMessage["headers"];
  body: string;
}

/**
 * Answers request number `index` (0-based); may also destroy the socket or never answer.
 */
export type StubHandler = (index: number, request: Received, response: ServerResponse) => void;

export interface Stub {
  url: string;
  received: Received[];
  close(): Promise<void>;
}

/** Answer with a JSON body. */
export function sendJSON(
  response: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  response.writeHead(status, { "content-type": "application/json", ...headers });
  response.end(JSON.stringify(body));
}

/** Start a stub on a free loopback port. */
export function startStub(handler: StubHandler): Promise<Stub> {
  const received: Received[] = [];
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      const entry: Received = {
        method: request.method ?? "",
        path: request.url ?? "",
        headers: request.headers,
        body: Buffer.concat(chunks).toString("utf-8"),
      };
      received.push(entry);
      handler(received.length - 1, entry, response);
    });
  });
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo;
      resolve({
        url: `http://127.0.0.1:${port}`,
        received,
        close: () =>
          new Promise<void>((done) => {
            // Hung responses would keep the server open forever.
            server.closeAllConnections();
            server.close(() => done());
          }),
      });
    });
  });
}
