// Answers as the LLM APIs send them (shapes from their documentation, shortened), with text
// beyond ASCII so that splits fall inside UTF-8 sequences: the metering tests' inputs.

const chatChunk = (fields: string) =>
  `{"id":"chatcmpl-Bx1","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","system_fingerprint":null,${fields}}`;

export const OPENAI_CHAT_JSON = JSON.stringify({
  id: 'chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT',
  object: 'chat.completion',
  created: 1741569952,
  model: 'gpt-4.1-2025-04-14',
  choices: [
    {
      index: 0,
      message: { role: 'assistant', content: 'Héllo! Ça va? 🙂 “usage” is a word', refusal: null, annotations: [] },
      logprobs: null,
      finish_reason: 'stop',
    },
  ],
  usage: {
    prompt_tokens: 19,
    completion_tokens: 10,
    total_tokens: 29,
    prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0 },
  },
  service_tier: 'default',
});

export const OPENAI_CHAT_SSE = [
  `data: ${chatChunk('"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null')}`,
  `data: ${chatChunk('"choices":[{"index":0,"delta":{"content":"Héllo 🙂"},"logprobs":null,"finish_reason":null}],"usage":null')}`,
  `data: ${chatChunk('"choices":[{"index":0,"delta":{"content":" wörld"},"logprobs":null,"finish_reason":null}],"usage":null')}`,
  `data: ${chatChunk('"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null')}`,
  `data: ${chatChunk('"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}')}`,
  'data: [DONE]',
]
  .map((line) => `${line}\n\n`)
  .join('');

export const RESPONSES_JSON = JSON.stringify({
  id: 'resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b',
  object: 'response',
  created_at: 1741476542,
  status: 'completed',
  model: 'gpt-4.1-2025-04-14',
  output: [
    {
      type: 'message',
      id: 'msg_67ccd2bf17f0819081ff3bb2cf6508e60bb6a6b452d3795b',
      status: 'completed',
      role: 'assistant',
      content: [{ type: 'output_text', text: 'Ça va très bien 🙂', annotations: [] }],
    },
  ],
  usage: {
    input_tokens: 36,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: 87,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 123,
  },
  user: null,
  metadata: {},
});

const response = (status: string, usage: string) =>
  `{"id":"resp_1","object":"response","created_at":1741476542,"status":"${status}","model":"gpt-4.1","output":[],"usage":${usage}}`;

export const RESPONSES_SSE = [
  ['response.created', `{"type":"response.created","sequence_number":0,"response":${response('in_progress', 'null')}}`],
  [
    'response.in_progress',
    `{"type":"response.in_progress","sequence_number":1,"response":${response('in_progress', 'null')}}`,
  ],
  [
    'response.output_text.delta',
    '{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Ça va 🙂"}',
  ],
  [
    'response.completed',
    `{"type":"response.completed","sequence_number":9,"response":${response('completed', '{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123}')}}`,
  ],
]
  .map(([event, data]) => `event: ${event}\ndata: ${data}\n\n`)
  .join('');

export const ANTHROPIC_JSON = JSON.stringify({
  id: 'msg_013Zva2CMHLNnXjNJJKqJ2EF',
  type: 'message',
  role: 'assistant',
  model: 'claude-sonnet-4-20250514',
  content: [{ type: 'text', text: 'Grüße aus Köln 🙂' }],
  stop_reason: 'end_turn',
  stop_sequence: null,
  usage: { input_tokens: 2095, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 503 },
});

export const ANTHROPIC_SSE = [
  [
    'message_start',
    '{"type":"message_start","message":{"id":"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-20250514","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1}}}',
  ],
  ['content_block_start', '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}'],
  ['ping', '{"type": "ping"}'],
  ['content_block_delta', '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Grüße 🙂"}}'],
  ['content_block_stop', '{"type":"content_block_stop","index":0}'],
  [
    'message_delta',
    '{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}',
  ],
  ['message_stop', '{"type":"message_stop"}'],
]
  .map(([event, data]) => `event: ${event}\ndata: ${data}\n\n`)
  .join('');
