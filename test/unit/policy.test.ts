// Policy evaluation (gateway/policy/evaluate.ts) as the pure function it is: the document and
// the facts of one call in, a verdict out. Rules decide in order, the first whose every
// populated condition holds; the rate window is asked only when a rule needs it; anything
// that goes wrong while evaluating gives on_error. Also the document's strict schema and the
// in-process rate window on an injected clock.
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { evaluatePolicy, type CallFacts, type RateProbe } from '../../gateway/policy/evaluate.ts';
import { createMemoryRateWindow } from '../../gateway/policy/rate.ts';
import { PolicyDocument, describePolicyIssue } from '../../gateway/policy/schema.ts';

const facts = (over: Partial<CallFacts> = {}): CallFacts => ({
  agentId: 'agt_a',
  tool: null,
  bodyBytes: 100,
  callerKind: 'token',
  ...over,
});

/** A rate probe that answers `count` and remembers how often it was asked. */
function probe(count: number): RateProbe & { asked: number } {
  const p = Object.assign(
    async () => {
      p.asked += 1;
      return count;
    },
    { asked: 0 },
  );
  return p;
}

const noRate: RateProbe = async () => assert.fail('the rate window was asked though no rule needs it');

describe('policy evaluation', () => {
  it('lets the first matching rule decide, numbered from 1, and the default decide when none does', async () => {
    const doc = {
      default: 'warn',
      on_error: 'deny',
      rules: [
        { action: 'deny', match: { agents: ['agt_b'] } },
        { action: 'allow', match: { agents: ['agt_a'] } },
        { action: 'deny' },
      ],
    };
    assert.deepEqual(await evaluatePolicy(doc, facts(), noRate), {
      action: 'allow',
      matchedRule: 2,
      source: 'rule',
      reason: 'rule 2 matched',
    });
    assert.deepEqual(await evaluatePolicy(doc, facts({ agentId: 'agt_b' }), noRate), {
      action: 'deny',
      matchedRule: 1,
      source: 'rule',
      reason: 'rule 1 matched',
    });
    assert.deepEqual(await evaluatePolicy({ ...doc, rules: doc.rules.slice(0, 2) }, facts({ agentId: 'x' }), noRate), {
      action: 'warn',
      matchedRule: null,
      source: 'default',
      reason: 'no rule matched',
    });
  });

  it('matches tools exactly or by a trailing-* prefix, and never a call without a tool', async () => {
    const doc = (tools: string[]) => ({
      default: 'allow',
      on_error: 'deny',
      rules: [{ action: 'deny', match: { tools } }],
    });
    const action = async (tools: string[], tool: string | null) =>
      (await evaluatePolicy(doc(tools), facts({ tool }), noRate)).action;
    assert.equal(await action(['search'], 'search'), 'deny');
    assert.equal(await action(['search'], 'search2'), 'allow');
    assert.equal(await action(['search'], 'Search'), 'allow');
    assert.equal(await action(['fs.*'], 'fs.read'), 'deny');
    assert.equal(await action(['fs.*'], 'fs.'), 'deny');
    assert.equal(await action(['fs.*'], 'fsx'), 'allow');
    assert.equal(await action(['fs.*'], 'xfs.read'), 'allow');
    assert.equal(await action(['*'], 'anything'), 'deny');
    assert.equal(await action(['*'], null), 'allow');
    assert.equal(await action(['a', 'b*'], 'bee'), 'deny');
    // An empty list is an unpopulated condition: it matches every call.
    assert.equal(await action([], null), 'deny');
  });

  it("matches callers by how the caller came in: a /v1 token or a public agent's payer", async () => {
    const doc = { default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { callers: ['x402'] } }] };
    assert.equal((await evaluatePolicy(doc, facts({ callerKind: 'token' }), noRate)).action, 'allow');
    assert.equal((await evaluatePolicy(doc, facts({ callerKind: 'x402' }), noRate)).action, 'deny');
    assert.equal(
      PolicyDocument.safeParse({ ...doc, rules: [{ action: 'deny', match: { callers: ['bot'] } }] }).success,
      false,
    );
  });

  it('reads max_body_bytes as "at least", an unknown size as unbounded', async () => {
    const doc = { default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { max_body_bytes: 1000 } }] };
    assert.equal((await evaluatePolicy(doc, facts({ bodyBytes: 999 }), noRate)).action, 'allow');
    assert.equal((await evaluatePolicy(doc, facts({ bodyBytes: 1000 }), noRate)).action, 'deny');
    assert.equal((await evaluatePolicy(doc, facts({ bodyBytes: null }), noRate)).action, 'deny');
  });

  it('matches rate_per_min when the last minute holds more calls, asking the window only when a rule needs it', async () => {
    const doc = {
      default: 'allow',
      on_error: 'warn',
      rules: [
        { action: 'deny', match: { agents: ['agt_other'], rate_per_min: 1 } },
        { action: 'deny', match: { rate_per_min: 10 } },
        { action: 'warn', match: { rate_per_min: 5 } },
      ],
    };
    const at = async (count: number) => {
      const rate = probe(count);
      const verdict = await evaluatePolicy(doc, facts(), rate);
      return { action: verdict.action, rule: verdict.matchedRule };
    };
    assert.deepEqual(await at(11), { action: 'deny', rule: 2 });
    assert.deepEqual(await at(10), { action: 'warn', rule: 3 });
    assert.deepEqual(await at(6), { action: 'warn', rule: 3 });
    assert.deepEqual(await at(5), { action: 'allow', rule: null });
    // Rule 1's agent condition fails first, so its rate condition costs no round trip.
    const rate = probe(100);
    const first = { ...doc, rules: doc.rules.slice(0, 1) };
    assert.equal((await evaluatePolicy(first, facts(), rate)).source, 'default');
    assert.equal(rate.asked, 0);
    assert.equal((await evaluatePolicy(first, facts({ agentId: 'agt_other' }), rate)).action, 'deny');
    assert.equal(rate.asked, 1);
  });

  it('gives on_error when the rate window fails, and when the stored document no longer parses (deny if it names none)', async () => {
    const doc = { default: 'allow', on_error: 'warn', rules: [{ action: 'deny', match: { rate_per_min: 1 } }] };
    const failing: RateProbe = async () => {
      throw new Error('redis down');
    };
    assert.deepEqual(await evaluatePolicy(doc, facts(), failing), {
      action: 'warn',
      matchedRule: null,
      source: 'on_error',
      reason: 'policy evaluation failed',
    });
    const unreadable = { default: 'allow', on_error: 'allow', rules: [{ action: 'deny', match: { wat: 1 } }] };
    assert.equal((await evaluatePolicy(unreadable, facts(), noRate)).action, 'allow');
    assert.equal((await evaluatePolicy({ on_error: 'warn' }, facts(), noRate)).action, 'warn');
    for (const stored of [null, 'deny', 42, { on_error: 'maybe' }, { default: 'allow' }])
      assert.deepEqual(await evaluatePolicy(stored, facts(), noRate), {
        action: 'deny',
        matchedRule: null,
        source: 'on_error',
        reason: 'policy evaluation failed',
      });
  });

  describe('properties', () => {
    const action = fc.constantFrom('allow', 'warn', 'deny');
    const match = fc.record(
      {
        agents: fc.array(fc.constantFrom('agt_a', 'agt_b', 'agt_c'), { maxLength: 3 }),
        tools: fc.array(fc.constantFrom('search', 'fs.*', 'fs.read', '*'), { maxLength: 3 }),
        callers: fc.array(fc.constantFrom('token' as const, 'x402' as const), { maxLength: 2 }),
        max_body_bytes: fc.nat({ max: 2000 }),
        rate_per_min: fc.nat({ max: 20 }),
      },
      { requiredKeys: [] },
    );
    const rule = fc.record({ action, match }, { requiredKeys: ['action'] });
    const doc = fc.record({ default: action, on_error: action, rules: fc.array(rule, { maxLength: 6 }) });
    const callFacts = fc.record({
      agentId: fc.constantFrom('agt_a', 'agt_b', 'agt_z'),
      tool: fc.option(fc.constantFrom('search', 'fs.read', 'fs.write', 'other'), { nil: null }),
      bodyBytes: fc.option(fc.nat({ max: 3000 }), { nil: null }),
      callerKind: fc.constantFrom('token' as const, 'x402' as const),
    });

    it('a verdict names the rule that decided: that rule matches on its own, and rules appended after it change nothing', async () => {
      await fc.assert(
        fc.asyncProperty(doc, callFacts, fc.nat({ max: 25 }), doc, async (policy, call, count, other) => {
          const verdict = await evaluatePolicy(policy, call, probe(count));
          assert.notEqual(verdict.source, 'on_error');
          if (verdict.source === 'default') {
            assert.equal(verdict.action, policy.default);
            assert.equal(verdict.matchedRule, null);
            return;
          }
          const index = verdict.matchedRule! - 1;
          assert.equal(verdict.action, policy.rules[index].action);
          // The deciding rule, on its own, matches.
          const alone = { ...policy, rules: [policy.rules[index]] };
          assert.equal((await evaluatePolicy(alone, call, probe(count))).source, 'rule');
          // Rules appended after it never change the verdict.
          const longer = { ...policy, rules: [...policy.rules, ...other.rules] };
          assert.deepEqual(await evaluatePolicy(longer, call, probe(count)), verdict);
        }),
        { numRuns: 300 },
      );
    });

    it('never throws on any stored value: anything that is not a policy gives an on_error verdict', async () => {
      await fc.assert(
        fc.asyncProperty(fc.jsonValue(), callFacts, async (stored, call) => {
          const verdict = await evaluatePolicy(stored, call, probe(0));
          assert.ok(['allow', 'warn', 'deny'].includes(verdict.action));
          if (!PolicyDocument.safeParse(stored).success) assert.equal(verdict.source, 'on_error');
        }),
        { numRuns: 300 },
      );
    });
  });
});

describe('policy document schema', () => {
  const issue = (input: unknown) => {
    const parsed = PolicyDocument.safeParse(input);
    assert.ok(!parsed.success, `accepted ${JSON.stringify(input)}`);
    return describePolicyIssue(parsed.error, input);
  };

  it('accepts a minimal document and stores an absent rule list as empty', () => {
    assert.deepEqual(PolicyDocument.parse({ default: 'allow', on_error: 'deny' }), {
      default: 'allow',
      on_error: 'deny',
      rules: [],
    });
  });

  it('refuses unknown keys at any depth, naming them, so a typo cannot widen a rule', () => {
    assert.equal(issue({ default: 'allow', on_error: 'deny', extra: 1 }), 'unknown field: extra');
    assert.equal(
      issue({ default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { max_body_byte: 5 } }] }),
      'unknown field in rules.0.match: max_body_byte',
    );
  });

  it('names a missing default or on_error, a bad action, a bad tool pattern and a bad count', () => {
    assert.equal(issue({ on_error: 'deny' }), 'default is required');
    assert.equal(issue({ default: 'allow' }), 'on_error is required');
    assert.equal(issue({ default: 'block', on_error: 'deny' }), 'default: action must be allow, warn or deny');
    assert.equal(
      issue({ default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { tools: ['a*b'] } }] }),
      'rules.0.match.tools.0: a tool pattern allows one trailing * only',
    );
    assert.equal(
      issue({ default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { tools: [''] } }] }),
      'rules.0.match.tools.0: tool patterns must be non-empty',
    );
    for (const bad of [-1, 1.5, '5'])
      assert.equal(
        issue({ default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { rate_per_min: bad } }] }),
        'rules.0.match.rate_per_min: rate_per_min must be a non-negative integer',
      );
    assert.equal(issue('not an object'), 'invalid policy document');
  });
});

describe('policy rate window (in process)', () => {
  it('counts one caller’s calls over the last 60 s, this one included, on its own clock', async () => {
    let now = 1_000_000;
    const window = createMemoryRateWindow(() => now);
    assert.equal(await window.hit('a'), 1);
    assert.equal(await window.hit('a'), 2);
    assert.equal(await window.hit('b'), 1);
    now += 30_000;
    assert.equal(await window.hit('a'), 3);
    // 60 s after the first two calls they have left the window; the one at +30 s has not.
    now += 30_000;
    assert.equal(await window.hit('a'), 2);
    now += 59_999;
    assert.equal(await window.hit('a'), 2);
    now += 60_000;
    assert.equal(await window.hit('a'), 1);
  });

  it('agrees with an exact count of the calls in the last 60 whole seconds', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.nat({ max: 10_000 }), { minLength: 1, maxLength: 200 }), async (gaps) => {
        let now = 5_000_000;
        const window = createMemoryRateWindow(() => now);
        const seconds: number[] = [];
        for (const gap of gaps) {
          now += gap * 10;
          const second = Math.floor(now / 1000);
          seconds.push(second);
          assert.equal(await window.hit('caller'), seconds.filter((s) => s > second - 60).length);
        }
      }),
      { numRuns: 200 },
    );
  });
});
