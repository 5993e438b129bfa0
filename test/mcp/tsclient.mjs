// An MCP client built on the official TypeScript SDK, run by the Go tests of the MCP gateway
// (mcpts_test.go) against Vigil: over Streamable HTTP through `vigil serve --mcp NAME=URL`,
// or over stdio by launching `vigil mcp wrap -- … server-everything stdio`. It lists the
// tools, calls an allowed, a denied, a modified and a held tool, and prints one JSON
// summary line on stdout; the Go test approves the held call meanwhile and asserts on the
// summary.
//
// usage: node tsclient.mjs '{"transport":"http","url":"…","headers":{…}}'
//        node tsclient.mjs '{"transport":"stdio","command":"…","args":[…],"env":{…}}'

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const cfg = JSON.parse(process.argv[2] ?? '{}');

function transport() {
  switch (cfg.transport) {
    case 'http':
      return new StreamableHTTPClientTransport(new URL(cfg.url), { requestInit: { headers: cfg.headers ?? {} } });
    case 'stdio':
      // The SDK passes the child only a few variables unless told otherwise; Vigil's
      // wrapper needs VIGIL_URL and VIGIL_API_KEY.
      return new StdioClientTransport({
        command: cfg.command,
        args: cfg.args ?? [],
        env: { ...process.env, ...(cfg.env ?? {}) },
        stderr: 'inherit',
      });
    default:
      throw new Error(`unknown transport ${JSON.stringify(cfg.transport)}`);
  }
}

/** What a tool result says: its text, and whether it is an error. */
function summary(res) {
  const text = (res.content ?? [])
    .filter((c) => c.type === 'text')
    .map((c) => c.text)
    .join('');
  return { isError: res.isError === true, text };
}

const client = new Client({ name: 'vigil-ts-test', version: '1.0.0' });
await client.connect(transport());
const out = { server: client.getServerVersion() ?? null };

const { tools } = await client.listTools();
out.tools = tools.map((t) => t.name).sort();

const call = async (name, args, options) => summary(await client.callTool({ name, arguments: args }, undefined, options));
out.allowed = await call('echo', { message: 'hello' });
out.denied = await call('get-env', {});
out.modifiedArgs = await call('echo', { message: 'key secret-abc1 here' });
out.modifiedResult = await call('echo', { message: 'tok-12345' });
// Held until the Go test approves it through /api/holds; the SDK's own timeout (60 s by
// default) is lifted to the test's.
out.held = await call('get-sum', { a: 2, b: 3 }, { timeout: 120_000 });

await client.close();
process.stdout.write(JSON.stringify(out) + '\n');
