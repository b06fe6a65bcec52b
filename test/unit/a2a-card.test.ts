// The card the gateway serves for an A2A agent (gateway/a2a/card.ts servedCard) names nothing on
// the upstream's host, under whatever scheme or port the upstream's own card gives it.
import assert from 'node:assert/strict';
import { servedCard } from '../../gateway/a2a/card.ts';

describe('the served A2A card', () => {
  it("drops links to the upstream's host on any port or scheme, and keeps others", () => {
    const card = {
      name: 'agent',
      documentationUrl: 'https://agent.internal:8443/docs',
      iconUrl: 'http://agent.internal/icon.png',
      provider: { organization: 'o', url: 'http://agent.internal:9000/' },
      skills: [],
    };
    const served = servedCard(card, 'http://agent.internal:8080/a2a', 'https://gw.example/v1/proxy/agt_x/stream', {
      kind: 'bearer',
    });
    assert.equal(served.documentationUrl, undefined);
    assert.equal(served.iconUrl, undefined);
    assert.deepEqual(served.provider, { organization: 'o', url: '' });
    assert.doesNotMatch(JSON.stringify(served), /agent\.internal/);
    const elsewhere = servedCard(
      { ...card, documentationUrl: 'https://docs.example/agent' },
      'http://agent.internal:8080/a2a',
      'https://gw.example/v1/proxy/agt_x/stream',
      { kind: 'bearer' },
    );
    assert.equal(elsewhere.documentationUrl, 'https://docs.example/agent');
  });
});
