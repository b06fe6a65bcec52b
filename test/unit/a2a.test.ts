// The A2A domain rules as the pure functions they are (gateway/a2a/): both spellings of a method
// are one method, where a request names its tasks, which task an answer names (1.0 and 0.3
// shapes), the card the gateway serves (nothing of the upstream left), and the policy conditions
// and create rules that read them.
import assert from 'node:assert/strict';
import { A2aRequestError, a2aRequestFacts, canonicalA2aMethod, taskOfResult } from '../../gateway/a2a/methods.ts';
import { servedCard, skillsOf } from '../../gateway/a2a/card.ts';
import { evaluatePolicy, type CallFacts } from '../../gateway/policy/evaluate.ts';
import { agentRuleError, type AgentRuleState } from '../../api/agents/schema.ts';

describe('A2A methods', () => {
  it('knows both spellings of each method as one, and not ListTasks or the extended card', () => {
    for (const [legacy, name] of [
      ['message/send', 'SendMessage'],
      ['message/stream', 'SendStreamingMessage'],
      ['tasks/get', 'GetTask'],
      ['tasks/cancel', 'CancelTask'],
      ['tasks/resubscribe', 'SubscribeToTask'],
      ['tasks/pushNotificationConfig/set', 'CreateTaskPushNotificationConfig'],
      ['tasks/pushNotificationConfig/get', 'GetTaskPushNotificationConfig'],
      ['tasks/pushNotificationConfig/list', 'ListTaskPushNotificationConfigs'],
      ['tasks/pushNotificationConfig/delete', 'DeleteTaskPushNotificationConfig'],
    ]) {
      assert.equal(canonicalA2aMethod(legacy), name);
      assert.equal(canonicalA2aMethod(name), name);
    }
    for (const unknown of ['ListTasks', 'GetExtendedAgentCard', 'agent/getAuthenticatedExtendedCard', 'tasks/list'])
      assert.equal(canonicalA2aMethod(unknown), null);
  });

  it('finds the tasks a request is about, the skill and the context', () => {
    assert.deepEqual(
      a2aRequestFacts('message/send', {
        message: { taskId: 't1', contextId: 'c1', referenceTaskIds: ['t0'], metadata: { skill: 'echo' } },
      }),
      {
        method: 'SendMessage',
        sent: 'message/send',
        streaming: false,
        skill: 'echo',
        taskIds: ['t1', 't0'],
        contextId: 'c1',
      },
    );
    assert.deepEqual(a2aRequestFacts('SendStreamingMessage', { message: {} }).taskIds, []);
    assert.equal(a2aRequestFacts('SendStreamingMessage', { message: {} }).streaming, true);
    assert.deepEqual(a2aRequestFacts('GetTask', { id: 't2' }).taskIds, ['t2']);
    assert.deepEqual(a2aRequestFacts('tasks/resubscribe', { id: 't3' }).taskIds, ['t3']);
    // 1.0 names the task of a push config `taskId`; 0.3's get/list/delete call it `id`.
    assert.deepEqual(a2aRequestFacts('GetTaskPushNotificationConfig', { taskId: 't4', id: 'cfg' }).taskIds, ['t4']);
    assert.deepEqual(a2aRequestFacts('tasks/pushNotificationConfig/get', { id: 't5' }).taskIds, ['t5']);
    assert.deepEqual(a2aRequestFacts('tasks/pushNotificationConfig/set', { taskId: 't6' }).taskIds, ['t6']);
    assert.deepEqual(a2aRequestFacts('ListTasks', {}), {
      method: null,
      sent: 'ListTasks',
      streaming: false,
      skill: null,
      taskIds: [],
      contextId: null,
    });
  });

  it('refuses a request about a task that names none, or ids that are not short strings', () => {
    assert.throws(() => a2aRequestFacts('tasks/get', {}), A2aRequestError);
    assert.throws(() => a2aRequestFacts('GetTask', { id: 42 }), A2aRequestError);
    assert.throws(() => a2aRequestFacts('GetTask', { id: 'x'.repeat(257) }), A2aRequestError);
    assert.throws(() => a2aRequestFacts('SendMessage', { message: { metadata: { skill: ['a'] } } }), A2aRequestError);
    assert.throws(() => a2aRequestFacts('SendMessage', { message: { taskId: 'a\u0000b' } }), A2aRequestError);
  });

  it('reads the task an answer names, in the 1.0 and the 0.3 shapes', () => {
    const seen = { taskId: 't', contextId: 'c' };
    for (const result of [
      { task: { id: 't', contextId: 'c', status: {} } },
      { statusUpdate: { taskId: 't', contextId: 'c', status: {} } },
      { artifactUpdate: { taskId: 't', contextId: 'c' } },
      { message: { messageId: 'm', taskId: 't', contextId: 'c' } },
      { id: 't', contextId: 'c', status: { state: 'TASK_STATE_COMPLETED' } },
      { kind: 'task', id: 't', contextId: 'c', status: {} },
      { kind: 'status-update', taskId: 't', contextId: 'c', status: {} },
      { kind: 'message', messageId: 'm', taskId: 't', contextId: 'c' },
    ])
      assert.deepEqual(taskOfResult(result), seen, JSON.stringify(result));
    assert.equal(taskOfResult({ message: { messageId: 'm' } }), null);
    assert.equal(taskOfResult(null), null);
    assert.equal(taskOfResult('text'), null);
  });
});

describe('the card the gateway serves', () => {
  const upstream = 'http://10.1.2.3:9000/a2a';
  const card = {
    name: 'agent',
    supportedInterfaces: [
      { url: upstream, protocolBinding: 'JSONRPC', protocolVersion: '1.0' },
      { url: 'http://10.1.2.3:9000/rest', protocolBinding: 'HTTP+JSON', protocolVersion: '1.0' },
    ],
    provider: { organization: 'org', url: 'http://10.1.2.3:9000/about' },
    documentationUrl: 'http://10.1.2.3:9000/docs',
    securitySchemes: { key: { apiKeySecurityScheme: { name: 'x-key' } } },
    securityRequirements: [{ schemes: { key: { list: [] } } }],
    signatures: [{ protected: 'p', signature: 's' }],
    capabilities: { streaming: true, extendedAgentCard: true },
    skills: [{ id: 'echo', name: 'Echo', description: 'echoes', tags: ['t'], securityRequirements: [{}] }],
  };

  it('points at the gateway, says its bearer scheme, and keeps nothing of the upstream', () => {
    const served = servedCard(card, upstream, 'https://gw.example/v1/proxy/agt_x/stream', { kind: 'bearer' });
    const text = JSON.stringify(served);
    assert.ok(!text.includes('10.1.2.3'), text);
    assert.ok(!text.includes('x-key'), text);
    assert.equal(served.signatures, undefined);
    assert.deepEqual(served.supportedInterfaces, [
      { url: 'https://gw.example/v1/proxy/agt_x/stream', protocolBinding: 'JSONRPC', protocolVersion: '1.0' },
    ]);
    assert.deepEqual(Object.keys(served.securitySchemes as object), ['gateway_bearer']);
    assert.equal((served.capabilities as { extendedAgentCard: boolean }).extendedAgentCard, false);
    assert.deepEqual(skillsOf(card), [{ id: 'echo', name: 'Echo', description: 'echoes', tags: ['t'] }]);
  });

  it('keeps a 0.3 card a 0.3 card', () => {
    const legacy = { name: 'old', url: upstream, protocolVersion: '0.3.0', preferredTransport: 'JSONRPC', skills: [] };
    const served = servedCard(legacy, upstream, 'https://gw.example/rpc', { kind: 'bearer' });
    assert.equal(served.url, 'https://gw.example/rpc');
    assert.deepEqual(served.security, [{ gateway_bearer: [] }]);
    assert.equal((served.securitySchemes as { gateway_bearer: { type: string } }).gateway_bearer.type, 'http');
  });
});

describe('policy and prices over A2A facts', () => {
  const facts = (over: Partial<CallFacts>): CallFacts => ({
    agentId: 'agt_a',
    tool: null,
    bodyBytes: 10,
    callerKind: 'token',
    ...over,
  });
  const doc = (match: Record<string, unknown>) => ({
    default: 'allow',
    on_error: 'deny',
    rules: [{ action: 'deny', match }],
  });
  const never = async () => 0;

  it('matches a method in either spelling, and a skill, never a call without one', async () => {
    for (const pattern of ['tasks/cancel', 'CancelTask', 'Cancel*'])
      assert.equal(
        (await evaluatePolicy(doc({ methods: [pattern] }), facts({ method: 'CancelTask' }), never)).action,
        'deny',
      );
    assert.equal(
      (await evaluatePolicy(doc({ methods: ['tasks/get'] }), facts({ method: 'CancelTask' }), never)).action,
      'allow',
    );
    assert.equal((await evaluatePolicy(doc({ skills: ['count'] }), facts({ skill: 'count' }), never)).action, 'deny');
    assert.equal((await evaluatePolicy(doc({ skills: ['count'] }), facts({ skill: null }), never)).action, 'allow');
    assert.equal((await evaluatePolicy(doc({ methods: ['SendMessage'] }), facts({}), never)).action, 'allow');
  });

  it('takes per-method and per-skill prices only for a2a, and known methods only', () => {
    const state = (over: Partial<AgentRuleState>): AgentRuleState => ({
      protocol: 'a2a',
      mcp_transport: null,
      mcp_protocol_version: null,
      pricing: { amount: '1', asset: 'USDC', network: 'base', pay_to: '0x' + '1'.repeat(40) },
      rate_limit_rps: null,
      rate_limit_burst: null,
      public: false,
      ...over,
    });
    const priced = (extra: Record<string, Record<string, string>>) =>
      state({ pricing: { amount: '1', asset: 'USDC', network: 'base', pay_to: '0x' + '1'.repeat(40), ...extra } });
    assert.equal(
      agentRuleError(priced({ methods: { 'message/send': '5', GetTask: '0' }, skills: { echo: '9' } })),
      undefined,
    );
    assert.match(agentRuleError(priced({ methods: { ListTasks: '5' } }))!, /not an A2A method/);
    assert.match(
      agentRuleError({ ...priced({ methods: { SendMessage: '5' } }), protocol: 'http' })!,
      /requires protocol a2a/,
    );
    assert.match(
      agentRuleError({ ...priced({ skills: { echo: '5' } }), protocol: 'mcp', mcp_transport: 'streamable_http' })!,
      /requires protocol a2a/,
    );
  });
});
