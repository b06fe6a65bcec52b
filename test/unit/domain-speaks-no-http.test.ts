// The gateway's domain (gateway/) speaks no HTTP: it returns its own kinds of refusal and failure
// (gateway/refusal.ts, gateway/upstream/errors.ts) and the door (api/) answers them with a
// status. The layer rules keep Koa out of gateway/, but cannot see a number: this scans the
// domain's code (comments aside) for the ways an HTTP answer is written. An upstream's or a
// vault's own status read as data (a recorded upstream_status, a retryable answer) is not one.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The ways a module writes an HTTP answer, each with what it says. */
const HTTP_ANSWERS: { pattern: RegExp; what: string }[] = [
  { pattern: /\bstatus\s*[:=]\s*[45]\d\d\b/, what: 'an HTTP error status set' },
  { pattern: /\bstatus(For\w*)?\s*\([^)]*\)\s*[:=]/, what: 'a status chosen for an answer' },
  { pattern: /\bctx\.(status|body|set)\b/, what: 'a Koa context answered' },
  { pattern: /\bApiError\b|http-error\.ts/, what: "the door's ApiError" },
  { pattern: /\b(badRequest|notFound|unprocessable)\(/, what: "the door's error helpers" },
  { pattern: /from\s+'(koa|@koa\/[\w-]+)'/, what: 'Koa imported' },
  { pattern: /return\s+[45]\d\d\s*;|\?\s*[45]\d\d\s*:\s*[45]\d\d\b/, what: 'an HTTP status returned' },
];

/** Code lines only: line and block comments are dropped (a comment may say what the door answers). */
function codeOf(text: string): string[] {
  return text
    .replace(/\/\*[\s\S]*?\*\//g, (comment) => comment.replace(/[^\n]/g, ''))
    .split('\n')
    .map((line) => line.replace(/(^|[^:'"`])\/\/.*$/, '$1'));
}

/** Each line of the text that writes an HTTP answer, as `line: what` (the first way it matches). */
function httpAnswersIn(text: string): string[] {
  const found: string[] = [];
  codeOf(text).forEach((line, i) => {
    // A fetch Response made for an HTTP client library the domain drives (the MCP SDK's
    // transport, gateway/mcp/tools-list.ts) answers that library, never a caller of the gateway.
    if (/\bnew Response\(/.test(line)) return;
    const answer = HTTP_ANSWERS.find(({ pattern }) => pattern.test(line));
    if (answer) found.push(`${i + 1}: ${answer.what}`);
  });
  return found;
}

function tsFilesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.ts'))
    .map((entry) => join(entry.parentPath, entry.name));
}

describe('the gateway domain speaks no HTTP', () => {
  it('finds each planted HTTP answer, and none in comments or in statuses read as data', () => {
    const planted = [
      "import type { Context } from 'koa';",
      "throw new ApiError(502, 'upstream unreachable');",
      'return { status: 404, error: message };',
      "export const statusForClass = (c: string) => (c === 'timeout' ? 504 : 502);",
      'ctx.status = 409;',
      "throw badRequest('name is required');",
    ].join('\n');
    assert.deepEqual(
      httpAnswersIn(planted).map((f) => Number(f.split(':')[0])),
      [1, 2, 3, 4, 5, 6],
      httpAnswersIn(planted).join('\n'),
    );
    const lawful = [
      '// The door answers 404 (api/errors.ts); a comment may say so.',
      '/** Caller sees 502 (ApiError in the door). */',
      'export const RETRYABLE_STATUSES = new Set([429, 502, 503, 504]);',
      "if (status >= 500) return 'upstream_5xx';",
      "if (method === 'GET') return new Response(null, { status: 405 });",
      'const ok = (r: { statusCode: number }) => r.statusCode >= 500;',
      "const url = 'http://example.test:8080/x'; // 404s are data here",
    ].join('\n');
    assert.deepEqual(httpAnswersIn(lawful), []);
  });

  it('holds for gateway/', () => {
    const found = tsFilesUnder('gateway').flatMap((file) =>
      httpAnswersIn(readFileSync(file, 'utf8')).map((f) => `${file}:${f}`),
    );
    assert.deepEqual(found, [], 'HTTP answers written in the domain');
  });
});
