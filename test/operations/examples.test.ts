// The examples in examples/ run as a user runs them (`node examples/NAME.ts`, a child process
// with only environment settings) against the test stack: each pays a priced agent of a tenant
// with settlement configured, from a payer funded with the dev token, and prints the answer.
// Asserted from outside: the exit status, what the example printed, the transfer on chain and the
// one call that reached the agent. Every example file is run here, so one that rots fails.
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import { promisify } from 'node:util';
import { stack } from '../support/stack.ts';
import { call, uniqueName } from '../support/http.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { startMcpServer } from '../support/mcp-server.ts';
import { startA2aServer } from '../support/a2a-server.ts';
import { freePort, isPortFree, waitFor as waitForPort } from '../../scripts/lib/ports.ts';
import { balanceOf, chainProvider, newAccount, newPayTo, newPayer, settlingTenant } from '../support/x402.ts';
import { waitFor } from '../support/wait.ts';
import { defaultPrefix } from '../../gateway/mcp-servers/names.ts';

const run = promisify(execFile);
const PRICE = 10_000n;

type Outcome = { code: number; stdout: string; stderr: string };

/** Runs one example as a child process with these settings (and no other gateway settings). */
async function runExample(file: string, settings: Record<string, string>, args: string[] = []): Promise<Outcome> {
  const env: Record<string, string> = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...settings };
  try {
    const { stdout, stderr } = await run(process.execPath, [`examples/${file}`, ...args], { env, timeout: 60_000 });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

describe('examples/ run against the stack', function () {
  this.timeout(120_000);
  const provider = () => chainProvider();
  let upstream: TestUpstream;
  let token: string;

  before(async () => {
    upstream = await startUpstream();
    token = await settlingTenant(`tenant-examples-${randomUUID()}`, await newAccount(`examples-${randomUUID()}`));
  });
  after(() => upstream.close());

  async function pricedAgent(payTo: string): Promise<string> {
    const res = await call('POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('paid-example'),
        upstream_url: upstream.url,
        capture_body: true,
        pricing: { amount: PRICE.toString(), asset: 'USDC', network: 'base', pay_to: payTo },
      },
    });
    assert.equal(res.status, 201, res.text);
    return res.json.id as string;
  }

  const examples = ['pay-x402-fetch.ts', 'pay-x402-v2.ts'];
  const others = [
    'call-agent.ts',
    'mcp-client.ts',
    'a2a-client.ts',
    'sell-agent.ts',
    'verify-receipt.ts',
    'metered.ts',
    'mcp-federation.ts',
    'channel.ts',
  ];

  it('runs every example in the folder (settings.ts is what they share)', async () => {
    const files = (await readdir('examples')).filter((f) => f.endsWith('.ts') && f !== 'settings.ts');
    assert.deepEqual(files.sort(), [...examples, ...others].sort());
  });

  for (const file of examples) {
    it(`${file} pays a priced agent (settled on chain once) and prints the agent's answer`, async () => {
      const payTo = newPayTo();
      const agentId = await pricedAgent(payTo);
      const payer = await newPayer(1_000_000n);
      const marker = `example ${file} ${randomUUID()}`;
      const out = await runExample(
        file,
        {
          GATEWAY_URL: stack().apiUrl,
          TOKEN: token,
          PAYER_PRIVATE_KEY: payer.privateKey,
          TOKEN_ADDRESS: stack().infra.tokenAddress,
          BODY: marker,
        },
        [agentId],
      );
      assert.equal(out.code, 0, `${out.stdout}\n${out.stderr}`);
      assert.match(out.stdout, /invocation inv_\S+ succeeded, upstream status 200/);
      assert.match(
        out.stdout,
        new RegExp(`paid ${PRICE} USDC units from ${payer.address}, settled in transaction 0x[0-9a-f]{64}`, 'i'),
      );
      assert.ok(out.stdout.includes(`answer: ${JSON.stringify({ echo: marker })}`), out.stdout);
      assert.equal(
        upstream.received.filter((r) => r.body.toString() === marker).length,
        1,
        'one call reached the agent',
      );
      assert.equal(await balanceOf(provider(), payTo), PRICE, 'the price moved to pay_to once');
      assert.equal(await balanceOf(provider(), payer.address), 1_000_000n - PRICE);
    });
  }

  it('metered.ts sells the demo chat endpoint priced by use and pays one streamed completion: the charge, not the maximum, moves', async () => {
    const port = await freePort();
    const demo = spawn(process.execPath, ['scripts/demo-upstream.ts'], {
      env: { ...process.env, DEMO_UPSTREAM_PORT: String(port) },
      stdio: 'ignore',
    });
    try {
      await waitForPort('the demo agent', async () => !(await isPortFree(port)), 30_000);
      const payTo = newPayTo();
      const payer = await newPayer(1_000_000n);
      const out = await runExample('metered.ts', {
        GATEWAY_URL: stack().apiUrl,
        TOKEN: token,
        PAYER_PRIVATE_KEY: payer.privateKey,
        TOKEN_ADDRESS: stack().infra.tokenAddress,
        CHAIN_RPC_URL: stack().infra.chainRpcUrl,
        DEMO_CHAT_URL: `http://127.0.0.1:${port}/v1/chat/completions`,
        PAY_TO: payTo,
        BODY: 'one two three',
      });
      assert.equal(out.code, 0, `${out.stdout}\n${out.stderr}`);
      const charged = /maximum 100000, charged (\d+) USDC units, settled in transaction 0x[0-9a-f]{64}/.exec(
        out.stdout,
      );
      assert.ok(charged, out.stdout);
      const charge = BigInt(charged[1]);
      assert.ok(charge > 0n && charge < 100_000n, `a charge below the maximum: ${charge}`);
      assert.equal(await balanceOf(provider(), payTo), charge, 'the charge moved to pay_to once');
      assert.equal(await balanceOf(provider(), payer.address), 1_000_000n - charge);
    } finally {
      demo.kill('SIGTERM');
    }
  });

  it("channel.ts pays an agent 100 times from one deposit: the payer's balance moves once, each call is charged", async () => {
    const upstream = await startUpstream((_req, res) => res.end('{"echo":true}'));
    try {
      const payTo = newPayTo();
      const payer = await newPayer(1_000_000n);
      const out = await runExample('channel.ts', {
        GATEWAY_URL: stack().apiUrl,
        TOKEN: token,
        PAYER_PRIVATE_KEY: payer.privateKey,
        TOKEN_ADDRESS: stack().infra.tokenAddress,
        CHAIN_RPC_URL: stack().infra.chainRpcUrl,
        UPSTREAM_URL: upstream.url,
        PAY_TO: payTo,
        PRICE: '1000',
        CALLS: '100',
      });
      assert.equal(out.code, 0, `${out.stdout}\n${out.stderr}`);
      assert.match(out.stdout, /deposit calls: 1, p50 [\d.]+ ms/);
      assert.match(out.stdout, /voucher calls: 99, p50 [\d.]+ ms, p95 [\d.]+ ms/);
      assert.equal(await balanceOf(provider(), payer.address), 1_000_000n - 100_000n, 'one deposit moved');
    } finally {
      await upstream.close();
    }
  });

  it('sell-agent.ts makes a priced agent public, finds it with the Bazaar client and pays it with no token', async () => {
    const payTo = newPayTo();
    const agentId = await pricedAgent(payTo);
    const payer = await newPayer(1_000_000n);
    const marker = `example sell-agent ${randomUUID()}`;
    const description = `Echoes ${randomUUID()}`;
    const out = await runExample(
      'sell-agent.ts',
      {
        GATEWAY_URL: stack().apiUrl,
        TOKEN: token,
        PAYER_PRIVATE_KEY: payer.privateKey,
        TOKEN_ADDRESS: stack().infra.tokenAddress,
        PUBLIC_DESCRIPTION: description,
        BODY: marker,
      },
      [agentId],
    );
    assert.equal(out.code, 0, `${out.stdout}\n${out.stderr}`);
    const publicUrl = `${stack().apiUrl}/public/agents/${agentId}`;
    assert.ok(out.stdout.includes(`agent ${agentId} is public at ${publicUrl} and ${publicUrl}/stream`), out.stdout);
    assert.match(
      out.stdout,
      new RegExp(`found in the catalog: ${publicUrl}/stream, ${PRICE} USDC units to 0x[0-9a-fA-F]{40} on eip155:8453`),
    );
    assert.match(
      out.stdout,
      new RegExp(`paid ${PRICE} USDC units from ${payer.address}, settled in transaction 0x[0-9a-f]{64}`, 'i'),
    );
    assert.ok(out.stdout.includes(`answer: ${JSON.stringify({ echo: marker })}`), out.stdout);
    const agent = await call('GET', `/v1/agents/${agentId}`, { token });
    assert.equal(agent.json.public, true);
    assert.equal(agent.json.public_description, description);
    assert.equal(upstream.received.filter((r) => r.body.toString() === marker).length, 1, 'one call reached the agent');
    assert.equal(await balanceOf(provider(), payTo), PRICE, 'the price moved to pay_to once');
  });

  it('call-agent.ts creates an agent, calls it transactionally and streaming, and prints both answers', async () => {
    const marker = `example call-agent ${randomUUID()}`;
    const out = await runExample('call-agent.ts', {
      GATEWAY_URL: stack().apiUrl,
      TOKEN: token,
      UPSTREAM_URL: upstream.url,
      BODY: marker,
    });
    assert.equal(out.code, 0, `${out.stdout}\n${out.stderr}`);
    const answer = JSON.stringify({ echo: marker });
    assert.ok(out.stdout.includes(`transactional answer: ${answer}`), out.stdout);
    assert.ok(out.stdout.includes(`streaming answer: ${answer}`), out.stdout);
    const agentId = /agent (agt_\S+) created/.exec(out.stdout)?.[1];
    assert.ok(agentId, out.stdout);
    const agent = await call('GET', `/v1/agents/${agentId}`, { token });
    assert.equal(agent.status, 200, agent.text);
    assert.equal(agent.json.upstream_url, upstream.url);
    // Both calls are invocations of the new agent, and each reached the upstream once.
    const ids = [
      /transactional: invocation (inv_\S+) succeeded/,
      /streaming: invocation (inv_[^,\s]+), status 200/,
    ].map((re) => re.exec(out.stdout)?.[1]);
    for (const id of ids) {
      assert.ok(id, out.stdout);
      // A streaming row is written beside the call, not before its answer: wait for it.
      const poll = () => call('GET', `/v1/proxy/${agentId}/invocations/${id}`, { token });
      await waitFor(async () => (await poll()).json?.status === 'succeeded', {
        everyMs: 100,
        what: `invocation ${id} succeeded`,
        state: async () => (await poll()).text,
      });
    }
    assert.equal(
      upstream.received.filter((r) => r.body.toString() === marker).length,
      2,
      'two calls reached the agent',
    );
  });

  it('a2a-client.ts sends a message to an A2A agent through the gateway with the SDK client', async () => {
    const a2a = await startA2aServer();
    try {
      const agent = await call('POST', '/v1/agents', {
        token,
        json: { name: uniqueName('a2a-example'), upstream_url: a2a.url, protocol: 'a2a' },
      });
      assert.equal(agent.status, 201, agent.text);
      const agentId = agent.json.id as string;
      const marker = `example a2a-client ${randomUUID()}`;
      const out = await runExample(
        'a2a-client.ts',
        { GATEWAY_URL: stack().apiUrl, TOKEN: token, TEXT: marker, SKILL: 'echo' },
        [agentId],
      );
      assert.equal(out.code, 0, `${out.stdout}\n${out.stderr}`);
      assert.match(out.stdout, /agent card: test-a2a-upstream, skills: echo, count, wait/);
      assert.ok(out.stdout.includes(`: echo: ${marker}`), out.stdout);
      assert.match(out.stdout, /read back, state TASK_STATE_COMPLETED/);
      // The message reached the upstream once, as the SDK client sent it, without the token.
      const sent = a2a.bodies.filter((b) => JSON.stringify(b).includes(marker));
      assert.equal(sent.length, 1);
      assert.ok(a2a.seen.every((h) => h.authorization === undefined));
    } finally {
      await a2a.close();
    }
  });

  it('mcp-federation.ts makes a virtual MCP server of two MCP agents and calls a prefixed tool through it', async () => {
    const mcp = await startMcpServer();
    try {
      const agents: string[] = [];
      const names = [uniqueName('federated-first'), uniqueName('federated-second')];
      for (const name of names) {
        const agent = await call('POST', '/v1/agents', {
          token,
          json: {
            name,
            upstream_url: mcp.url,
            protocol: 'mcp',
            mcp_transport: 'streamable_http',
            mcp_protocol_version: '2025-06-18',
          },
        });
        assert.equal(agent.status, 201, agent.text);
        agents.push(agent.json.id as string);
      }
      const prefix = defaultPrefix(names[1]);
      const marker = `example mcp-federation ${randomUUID()}`;
      const out = await runExample(
        'mcp-federation.ts',
        {
          GATEWAY_URL: stack().apiUrl,
          TOKEN: token,
          ARGUMENTS: JSON.stringify({ text: marker }),
          TOOL: `${prefix}_echo`,
        },
        agents,
      );
      assert.equal(out.code, 0, `${out.stdout}\n${out.stderr}`);
      assert.match(out.stdout, /server mcps_\S+ at http\S+\/mcp/);
      assert.ok(out.stdout.includes(`${prefix}_echo answered`), out.stdout);
      assert.ok(out.stdout.includes(`echo: ${marker}`), out.stdout);
    } finally {
      await mcp.close();
    }
  });

  it('mcp-client.ts calls a tool of an MCP agent through the gateway with the SDK client', async () => {
    const mcp = await startMcpServer();
    try {
      const agent = await call('POST', '/v1/agents', {
        token,
        json: {
          name: uniqueName('mcp-example'),
          upstream_url: mcp.url,
          protocol: 'mcp',
          mcp_transport: 'streamable_http',
          mcp_protocol_version: '2025-06-18',
        },
      });
      assert.equal(agent.status, 201, agent.text);
      const agentId = agent.json.id as string;
      const marker = `example mcp-client ${randomUUID()}`;
      const out = await runExample(
        'mcp-client.ts',
        {
          GATEWAY_URL: stack().apiUrl,
          TOKEN: token,
          TOOL: 'echo',
          ARGUMENTS: JSON.stringify({ text: marker }),
        },
        [agentId],
      );
      assert.equal(out.code, 0, `${out.stdout}\n${out.stderr}`);
      assert.match(out.stdout, /connected to test-upstream, session \S+/);
      assert.match(out.stdout, /tools: (count, echo|echo, count)/);
      assert.ok(
        out.stdout.includes(`echo answered: ${JSON.stringify([{ type: 'text', text: `echo: ${marker}` }])}`),
        out.stdout,
      );
      // The tool call is an invocation of the agent, recorded with its method and tool.
      let calls: { mcp_method: string; mcp_tool: string | null; status: string }[] = [];
      await waitFor(
        async () => {
          const listed = await call('GET', `/v1/invocations?agent_id=${agentId}&limit=100`, { token });
          calls = listed.json.data;
          return calls.some((c) => c.mcp_tool === 'echo' && c.status === 'succeeded');
        },
        { everyMs: 100, what: 'the echo call recorded succeeded', state: () => JSON.stringify(calls) },
      );
      assert.ok(
        calls.some((c) => c.mcp_method === 'tools/call' && c.mcp_tool === 'echo' && c.status === 'succeeded'),
        JSON.stringify(calls),
      );
      for (const headers of mcp.seen) assert.equal(headers.authorization, undefined, 'the token stayed at the gateway');
    } finally {
      await mcp.close();
    }
  });

  it("mcp-client.ts, as docs/API.md runs it, calls the echo tool of npm start's demo agent at /mcp", async () => {
    // npm start runs scripts/demo-upstream.ts as its demo agent; here it runs alone on a free port.
    const port = await freePort();
    const demo = spawn(process.execPath, ['scripts/demo-upstream.ts'], {
      env: { ...process.env, DEMO_UPSTREAM_PORT: String(port) },
      stdio: 'ignore',
    });
    try {
      await waitForPort('the demo agent', async () => !(await isPortFree(port)), 30_000);
      const agent = await call('POST', '/v1/agents', {
        token,
        json: {
          name: uniqueName('mcp-demo'),
          upstream_url: `http://127.0.0.1:${port}/mcp`,
          protocol: 'mcp',
          mcp_transport: 'streamable_http',
        },
      });
      assert.equal(agent.status, 201, agent.text);
      const marker = `demo mcp ${randomUUID()}`;
      const out = await runExample(
        'mcp-client.ts',
        { GATEWAY_URL: stack().apiUrl, TOKEN: token, TOOL: 'echo', ARGUMENTS: JSON.stringify({ text: marker }) },
        [agent.json.id as string],
      );
      assert.equal(out.code, 0, `${out.stdout}\n${out.stderr}`);
      assert.match(out.stdout, /connected to demo-echo/);
      assert.match(out.stdout, /^tools: echo$/m);
      assert.ok(
        out.stdout.includes(`echo answered: ${JSON.stringify([{ type: 'text', text: `echo: ${marker}` }])}`),
        out.stdout,
      );
      // The plain echo is unchanged beside it.
      const plain = await fetch(`http://127.0.0.1:${port}/`, { method: 'POST', body: 'hi' });
      assert.deepEqual(await plain.json(), { echo: 'hi', request_id: null });
    } finally {
      demo.kill('SIGTERM');
    }
  });

  it("verify-receipt.ts checks an invocation's receipt offline, and the request body against it", async () => {
    const created = await call('POST', '/v1/agents', {
      token,
      json: { name: uniqueName('receipt-example'), upstream_url: upstream.url, emit_receipts: true },
    });
    assert.equal(created.status, 201, created.text);
    const marker = `example verify-receipt ${randomUUID()}`;
    const invoked = await call('POST', `/v1/proxy/${created.json.id}`, {
      token,
      body: marker,
      headers: { 'content-type': 'text/plain' },
    });
    assert.equal(invoked.status, 202, invoked.text);
    const invocationId = invoked.json.invocation_id as string;
    const settings = { GATEWAY_URL: stack().apiUrl, TOKEN: token };

    const out = await runExample('verify-receipt.ts', { ...settings, BODY: marker }, [invocationId]);
    assert.equal(out.code, 0, `${out.stdout}\n${out.stderr}`);
    assert.match(out.stdout, new RegExp(`receipt verified \\(key \\S+\\): invocation ${invocationId} succeeded`));
    assert.match(out.stdout, /request body matches the receipt \(SHA-256 [0-9a-f]{64}\)/);
    const receipt = await call('GET', `/v1/invocations/${invocationId}/receipt`, { token });
    assert.equal(receipt.status, 200, receipt.text);
    assert.ok(out.stdout.includes(`key ${receipt.json.kid}`), out.stdout);

    const wrong = await runExample('verify-receipt.ts', { ...settings, BODY: `${marker}!` }, [invocationId]);
    assert.equal(wrong.code, 1, wrong.stdout);
    assert.match(wrong.stderr, /receipt NOT verified: BODY is not what the call sent/);
  });

  it('without a payer key, prints a new one and the command that funds it (exit 2)', async () => {
    const out = await runExample('pay-x402-fetch.ts', { GATEWAY_URL: stack().apiUrl, TOKEN: token }, ['agt_x']);
    assert.equal(out.code, 2);
    assert.match(out.stderr, /export PAYER_PRIVATE_KEY=0x[0-9a-f]{64}\n {2}npm run dev -- fund 0x[0-9a-fA-F]{40}/);
  });
});
