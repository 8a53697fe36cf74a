// The official openai client (and plain fetch, for bodies the client will not send) against a
// running `moengine serve`. Run by tests/server/serve_integration_test.cpp:
//   node openai_client_test.mjs main  BASE_URL MODEL   (server: --max-model-len 1024 --max-body-bytes 65536)
//   node openai_client_test.mjs queue BASE_URL MODEL   (server: --max-num-seqs 1 --max-waiting 1)
//   node openai_client_test.mjs auth  BASE_URL MODEL KEY (server: --api-key KEY)
// Exits non-zero with a message naming the first check that failed.
import OpenAI from 'openai';

const [scenario, baseURL, model, apiKey] = process.argv.slice(2);
const v1 = `${baseURL}/v1`;

function fail(message) {
  throw new Error(message);
}
function eq(got, want, what) {
  const g = JSON.stringify(got), w = JSON.stringify(want);
  if (g !== w) fail(`${what}:\n  got  ${g}\n  want ${w}`);
}
function ok(cond, what) {
  if (!cond) fail(what);
}

const client = new OpenAI({ baseURL: v1, apiKey: apiKey ?? 'unused', maxRetries: 0, timeout: 120000 });

async function post(path, body, headers = {}) {
  const res = await fetch(`${baseURL}${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

async function tokenCount(body) {
  const r = await post('/tokenize', body);
  eq(r.status, 200, `/tokenize ${JSON.stringify(body)} status`);
  const j = JSON.parse(r.text);
  eq(j.count, j.tokens.length, '/tokenize count');
  return j.count;
}

// A sample's value; `label` picks one series of a labelled family (finished_reason="abort").
async function metric(name, label = '') {
  const text = await (await fetch(`${baseURL}/metrics`)).text();
  const m = text.match(new RegExp(`^moengine:${name}\\{[^}]*${label}[^}]*\\} (\\S+)$`, 'm'));
  if (!m) fail(`/metrics has no moengine:${name}${label ? ` with ${label}` : ''}`);
  return Number(m[1]);
}

// After a client leaves, its request must end and its KV blocks be freed shortly.
async function expectEngineIdle(what) {
  const deadline = Date.now() + 10000;
  for (;;) {
    const running = await metric('num_requests_running');
    const usage = await metric('kv_cache_usage_perc');
    if (running === 0 && usage === 0) return;
    if (Date.now() > deadline) fail(`${what}: engine still busy 10 s later (running ${running}, kv usage ${usage})`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const greedy = { temperature: 0, ignore_eos: true };
const chatMessages = (text) => [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: text },
];

async function completionAlone(prompt, maxTokens) {
  const r = await client.completions.create({ model, prompt, max_tokens: maxTokens, ...greedy });
  return r.choices[0].text;
}

// Streams a completion, counting tokens through their logprobs (text can be held back, a
// token's logprob never is).
async function streamCompletion(prompt, maxTokens, extra = {}) {
  const stream = await client.completions.create({
    model, prompt, max_tokens: maxTokens, stream: true, stream_options: { include_usage: true }, logprobs: 0, ...greedy, ...extra,
  });
  let text = '', tokens = 0, usage = null, finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.logprobs) tokens += c.logprobs.tokens.length;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, tokens, usage, finish };
}

async function streamChat(content, maxTokens) {
  const stream = await client.chat.completions.create({
    model, messages: chatMessages(content), max_tokens: maxTokens, stream: true, stream_options: { include_usage: true },
    logprobs: true, ...greedy,
  });
  let text = '', tokens = 0, usage = null, finish = null, role = null, chunks = 0;
  for await (const chunk of stream) {
    chunks += 1;
    ok(chunk.object === 'chat.completion.chunk', `chunk object ${chunk.object}`);
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (chunks === 1) role = c.delta.role;
      text += c.delta.content ?? '';
      if (c.logprobs) tokens += c.logprobs.content.length;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, tokens, usage, finish, role };
}

async function basics() {
  const models = await client.models.list();
  eq(models.data.map((m) => m.id), [model], 'GET /v1/models ids');
  eq((await fetch(`${baseURL}/health`)).status, 200, 'GET /health');

  const prompt = 'The experts of a mixture';
  const promptTokens = await tokenCount({ prompt });
  const c = await client.completions.create({ model, prompt, max_tokens: 16, ...greedy });
  eq(c.object, 'text_completion', 'completion object');
  ok(/^cmpl-/.test(c.id), `completion id ${c.id}`);
  eq(c.choices[0].finish_reason, 'length', 'completion finish_reason');
  eq(c.usage, { prompt_tokens: promptTokens, completion_tokens: 16, total_tokens: promptTokens + 16, prompt_tokens_details: c.usage.prompt_tokens_details }, 'completion usage');
  const s = await streamCompletion(prompt, 16);
  eq(s.text, c.choices[0].text, 'streamed completion text equals the non-streamed text');
  eq(s.tokens, 16, 'streamed completion token count');
  eq([s.usage.prompt_tokens, s.usage.completion_tokens, s.usage.total_tokens], [promptTokens, 16, promptTokens + 16], 'streamed completion usage');
  eq(s.finish, 'length', 'streamed completion finish_reason');

  const ids = await client.completions.create({ model, prompt: [5, 6, 7, 8], max_tokens: 4, ...greedy });
  eq(ids.usage.prompt_tokens, 4, 'token-id prompt usage');

  const content = 'Tell me about experts.';
  const chatTokens = await tokenCount({ messages: chatMessages(content) });
  const chat = await client.chat.completions.create({ model, messages: chatMessages(content), max_completion_tokens: 16, ...greedy });
  eq(chat.object, 'chat.completion', 'chat object');
  ok(/^chatcmpl-/.test(chat.id), `chat id ${chat.id}`);
  eq(chat.choices[0].message.role, 'assistant', 'chat message role');
  eq(chat.choices[0].finish_reason, 'length', 'chat finish_reason');
  eq([chat.usage.prompt_tokens, chat.usage.completion_tokens], [chatTokens, 16], 'chat usage');
  const cs = await streamChat(content, 16);
  eq(cs.role, 'assistant', 'first chat chunk carries the role');
  eq(cs.text, chat.choices[0].message.content, 'streamed chat text equals the non-streamed text');
  eq(cs.tokens, 16, 'streamed chat token count');
  eq([cs.usage.prompt_tokens, cs.usage.completion_tokens], [chatTokens, 16], 'streamed chat usage');

  // A stop string from the greedy text ends it just before the string's first appearance.
  const full = c.choices[0].text;
  const stop = full.slice(6, 9);
  if (stop.length === 3 && !stop.includes('\uFFFD')) {
    const stopped = await client.completions.create({ model, prompt, max_tokens: 16, stop: [stop], ...greedy });
    eq(stopped.choices[0].text, full.slice(0, full.indexOf(stop)), `text up to the stop string ${JSON.stringify(stop)}`);
    eq(stopped.choices[0].finish_reason, 'stop', 'stop-string finish_reason');
    eq(stopped.choices[0].stop_reason, stop, 'stop_reason names the stop string');
  }

  const lp = await client.chat.completions.create({ model, messages: chatMessages('hi'), max_tokens: 3, logprobs: true, top_logprobs: 2, ...greedy });
  eq(lp.choices[0].logprobs.content.length, 3, 'chat logprobs entries');
  for (const e of lp.choices[0].logprobs.content) {
    ok(e.logprob <= 0 && Array.isArray(e.bytes) && e.top_logprobs.length === 2, `chat logprob entry ${JSON.stringify(e)}`);
    // Greedy picks the most likely token: the first of the top list.
    eq(e.top_logprobs[0].logprob, e.logprob, 'greedy token is the top logprob');
  }
  // n choices: greedy ones are all the greedy text; seeded ones use seed + index, streamed
  // or not; the prompt counts once in the usage.
  const three = await client.completions.create({ model, prompt, max_tokens: 16, n: 3, ...greedy });
  eq(three.choices.map((x) => [x.index, x.text]), [0, 1, 2].map((i) => [i, c.choices[0].text]), 'greedy n = 3');
  eq([three.usage.prompt_tokens, three.usage.completion_tokens], [promptTokens, 48], 'n = 3 usage');
  const sampled = { temperature: 1, ignore_eos: true, seed: 11 };
  const pair = await client.chat.completions.create({ model, messages: chatMessages(content), max_tokens: 8, n: 2, ...sampled });
  const second = await client.chat.completions.create({ model, messages: chatMessages(content), max_tokens: 8, ...sampled, seed: 12 });
  eq(pair.choices[1].message.content, second.choices[0].message.content, 'choice 1 draws with seed + 1');
  const pairStream = await client.chat.completions.create({ model, messages: chatMessages(content), max_tokens: 8, n: 2, ...sampled, stream: true, stream_options: { include_usage: true } });
  const texts = ['', ''];
  const finishes = [null, null];
  let pairUsage = null;
  for await (const chunk of pairStream) {
    if (chunk.usage) pairUsage = chunk.usage;
    for (const x of chunk.choices) {
      texts[x.index] += x.delta.content ?? '';
      if (x.finish_reason) finishes[x.index] = x.finish_reason;
    }
  }
  eq(texts, pair.choices.map((x) => x.message.content), 'streamed n = 2 texts equal the non-streamed ones');
  eq(finishes, ['length', 'length'], 'streamed n = 2 finish reasons');
  eq([pairUsage.prompt_tokens, pairUsage.completion_tokens], [chatTokens, 16], 'streamed n = 2 usage');

  // Echo with logprobs scores the prompt (as lm-eval's loglikelihood requests do): the
  // prompt's tokens come back first, the first without a logprob.
  const scored = await client.completions.create({ model, prompt, max_tokens: 1, echo: true, logprobs: 1, ...greedy });
  const sl = scored.choices[0].logprobs;
  ok(scored.choices[0].text.startsWith(prompt), `echoed text ${JSON.stringify(scored.choices[0].text)}`);
  eq(sl.tokens.length, promptTokens + 1, 'echo logprobs cover the prompt and the generated token');
  eq([sl.token_logprobs[0], sl.top_logprobs[0]], [null, null], 'the first prompt token has no logprob');
  ok(sl.token_logprobs.slice(1).every((x) => x <= 0), 'prompt logprobs are log-probabilities');
  eq(scored.choices[0].text.slice(prompt.length), c.choices[0].text.slice(0, scored.choices[0].text.length - prompt.length), 'echo then the greedy text');
  const echoStream = await client.completions.create({ model, prompt, max_tokens: 4, echo: true, stream: true, ...greedy });
  let echoed = '';
  for await (const chunk of echoStream) echoed += chunk.choices[0]?.text ?? '';
  ok(echoed.startsWith(prompt) && c.choices[0].text.startsWith(echoed.slice(prompt.length)), `streamed echo ${JSON.stringify(echoed)}`);

  // A +100 bias makes greedy decoding pick that token every step.
  const biased = await client.completions.create({ model, prompt, max_tokens: 4, logit_bias: { 72: 100 }, ...greedy });
  eq(biased.choices[0].text, 'HHHH', 'logit_bias +100 on "H"');
  const biasedChat = await client.chat.completions.create({ model, messages: chatMessages('hi'), max_tokens: 3, logit_bias: { 105: 100 }, ...greedy });
  eq(biasedChat.choices[0].message.content, 'iii', 'chat logit_bias +100 on "i"');
  const detok = await post('/detokenize', { tokens: [72, 105] });
  eq([detok.status, JSON.parse(detok.text)], [200, { prompt: 'Hi' }], '/detokenize');
}

async function concurrentStreams() {
  const prompts = Array.from({ length: 32 }, (_, i) => `Request number ${i} asks about expert ${i % 7}`);
  const alone = [];
  for (const p of prompts) alone.push(await completionAlone(p, 12));
  const together = await Promise.all(prompts.map((p) => streamCompletion(p, 12)));
  together.forEach((r, i) => {
    eq(r.text, alone[i], `concurrent stream ${i} equals its alone-run output`);
    eq([r.tokens, r.usage.completion_tokens, r.finish], [12, 12, 'length'], `concurrent stream ${i} tokens`);
  });
}

const err = (status, type, code, param, message) => ({ status, body: { error: { message, type, param, code } } });
const IR = 'invalid_request_error';

async function badInputsBesideALongStream() {
  const prompt = 'A long answer about routing tokens to experts';
  const expected = await completionAlone(prompt, 200);
  const long = streamCompletion(prompt, 200);

  const big = JSON.stringify({ model, prompt: 'x'.repeat(70000) });
  const chatBody = (extra) => JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, ...extra });
  const cases = [
    ['malformed JSON', '/v1/chat/completions', '{"model": "x", "messages": [',
      err(400, IR, 'invalid_json', null, "the request body is not valid JSON: parse error at line 1, column 29: syntax error while parsing value - unexpected end of input; expected '[', '{', or a literal")],
    ['number beyond a double', '/v1/completions', `{"model": "${model}", "prompt": [1e999]}`,
      err(400, IR, 'invalid_json', null, "the request body is not valid JSON: number overflow parsing '1e999'")],
    ['wrong type', '/v1/chat/completions', chatBody({ max_tokens: '16' }),
      err(422, IR, 'invalid_type', 'max_tokens', '"max_tokens" must be an integer, got a string')],
    ['missing field', '/v1/chat/completions', JSON.stringify({ model }),
      err(422, IR, 'missing_required_parameter', 'messages', '"messages" is required')],
    ['out of range', '/v1/chat/completions', chatBody({ temperature: -1 }),
      err(400, IR, 'invalid_value', 'temperature', '"temperature" must be a finite number >= 0, got -1')],
    ['empty messages', '/v1/chat/completions', JSON.stringify({ model, messages: [] }),
      err(400, IR, 'invalid_value', 'messages', '"messages" must not be empty')],
    ['prompt over the context', '/v1/completions', JSON.stringify({ model, prompt: Array(1024).fill(7) }),
      err(400, IR, 'context_length_exceeded', 'prompt', "This model's maximum context length is 1024 tokens. However, your prompt has 1024 tokens, which leaves no room for a completion. Please reduce the length of the prompt.")],
    ['max_tokens too large', '/v1/completions', JSON.stringify({ model, prompt: [1, 2, 3], max_tokens: 1022 }),
      err(400, IR, 'context_length_exceeded', 'max_tokens', "This model's maximum context length is 1024 tokens. However, you requested 1025 tokens (3 in the prompt, 1022 for the completion). Please reduce the length of the prompt or the completion.")],
    ['n = 0', '/v1/chat/completions', chatBody({ n: 0 }),
      err(400, IR, 'invalid_value', 'n', '"n" must be in [1, 64], got 0')],
    ['best_of over n', '/v1/completions', JSON.stringify({ model, prompt: 'x', n: 2, best_of: 3 }),
      err(400, IR, 'unsupported_value', 'best_of', '"best_of" must be 1 or equal to "n" (2): returning the best of more choices is not supported, got 3')],
    ['several prompts', '/v1/completions', JSON.stringify({ model, prompt: ['a', 'b'] }),
      err(400, IR, 'unsupported_value', 'prompt', '"prompt" must be a single prompt: a list of 2 prompts is not supported')],
    ['unknown model', '/v1/completions', JSON.stringify({ model: 'gpt-4', prompt: 'x' }),
      err(404, IR, 'model_not_found', 'model', 'The model `gpt-4` does not exist (GET /v1/models lists the served models)')],
    ['token outside the vocabulary', '/v1/completions', JSON.stringify({ model, prompt: [1, 999999] }),
      err(400, IR, 'invalid_value', 'prompt', '"prompt" has the token id 999999, outside the vocabulary (0..511)')],
    ['logit_bias token outside the vocabulary', '/v1/completions', JSON.stringify({ model, prompt: 'x', logit_bias: { 999999: 5 } }),
      err(400, IR, 'invalid_value', 'logit_bias', '"logit_bias" has the token id 999999, outside the vocabulary (0..511)')],
    ['logit_bias out of range', '/v1/chat/completions', chatBody({ logit_bias: { 5: -101 } }),
      err(400, IR, 'invalid_value', 'logit_bias', '"logit_bias" for token 5 must be in [-100, 100], got -101')],
    ['body over the limit', '/v1/completions', big,
      err(413, IR, 'request_too_large', null, `the request body (${big.length} bytes) is larger than the limit of 65536 bytes`)],
  ];
  const results = await Promise.all(cases.map(async ([what, path, body, want]) => {
    const r = await post(path, body);
    return [what, { status: r.status, body: JSON.parse(r.text) }, want];
  }));
  for (const [what, got, want] of results) eq(got, want, what);

  const notFound = await fetch(`${v1}/nope`);
  eq({ status: notFound.status, body: await notFound.json() }, err(404, IR, 'unknown_url', null, 'no route for GET /v1/nope'), 'unknown route');
  const wrongMethod = await fetch(`${v1}/completions`);
  eq({ status: wrongMethod.status, allow: wrongMethod.headers.get('allow'), body: await wrongMethod.json() },
    { status: 405, allow: 'POST', body: err(405, IR, 'method_not_allowed', null, 'method GET is not allowed for /v1/completions; allowed: POST').body }, 'wrong method');

  // The client maps them to its error classes.
  const sdkCases = [
    [() => client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }), OpenAI.NotFoundError, 404, 'model_not_found'],
    [() => client.chat.completions.create({ model, messages: [] }), OpenAI.BadRequestError, 400, 'invalid_value'],
    [() => client.completions.create({ model, prompt: 'x', max_tokens: 'many' }), OpenAI.UnprocessableEntityError, 422, 'invalid_type'],
  ];
  for (const [call, cls, status, code] of sdkCases) {
    try {
      await call();
      fail(`expected ${cls.name}`);
    } catch (e) {
      ok(e instanceof cls, `expected ${cls.name}, got ${e.constructor.name}: ${e.message}`);
      eq([e.status, e.code], [status, code], `${cls.name} status and code`);
    }
  }

  const done = await long;
  eq(done.text, expected, 'the long stream beside the bad inputs equals its alone-run output');
  eq([done.tokens, done.finish], [200, 'length'], 'the long stream ran to the end');
}

async function disconnects() {
  const abortsBefore = await metric('request_success_total', 'finished_reason="abort"');
  // Mid-stream: read a few chunks, then drop the connection.
  const ac = new AbortController();
  const stream = await client.completions.create({ model, prompt: 'Keep going', max_tokens: 1000, stream: true, ...greedy }, { signal: ac.signal });
  let n = 0;
  try {
    for await (const chunk of stream) {
      if (chunk.choices.length && ++n === 3) ac.abort();
    }
  } catch (e) {
    ok(e.name === 'APIUserAbortError' || e.name === 'AbortError', `abort raised ${e.name}: ${e.message}`);
  }
  ok(n >= 3, 'the stream produced chunks before the client left');
  await expectEngineIdle('client left mid-stream');

  // While waiting for a whole (non-streamed) response.
  const ac2 = new AbortController();
  const pending = client.chat.completions.create({ model, messages: chatMessages('long'), max_tokens: 1000, n: 3, ...greedy }, { signal: ac2.signal });
  for (const deadline = Date.now() + 10000; (await metric('num_requests_running')) < 3;) {
    ok(Date.now() < deadline, 'the three choices never ran together');
    await new Promise((r) => setTimeout(r, 5));
  }
  ac2.abort();
  await pending.then(() => fail('the aborted request completed'), () => {});
  await expectEngineIdle('client left while waiting for its three-choice response');
  eq(await metric('request_success_total', 'finished_reason="abort"'), abortsBefore + 4, 'the stream and all three choices counted as aborted');
}

async function queueFull() {
  // One running (its first chunk arrived), one waiting (its stream opened): a third is refused.
  // The running one is long enough to outlast the requests below on a fast machine.
  const first = await client.completions.create({ model, prompt: 'one', max_tokens: 3000, stream: true, ...greedy });
  const it = first[Symbol.asyncIterator]();
  await it.next();
  const second = await client.completions.create({ model, prompt: 'two', max_tokens: 20, stream: true, ...greedy });
  const r = await post('/v1/completions', { model, prompt: 'three', max_tokens: 4 });
  eq(r.status, 429, 'queue full status');
  eq(r.headers.get('retry-after'), '1', 'Retry-After');
  eq(JSON.parse(r.text), err(429, 'rate_limit_error', 'queue_full', null, 'the server is at capacity: 1 requests are already waiting; retry later').body, 'queue full body');
  try {
    await client.completions.create({ model, prompt: 'four', max_tokens: 4 });
    fail('expected RateLimitError');
  } catch (e) {
    ok(e instanceof OpenAI.RateLimitError, `expected RateLimitError, got ${e.constructor.name}`);
    eq(e.headers.get('retry-after'), '1', 'RateLimitError Retry-After');
  }
  let tokens = 1;
  for (;;) {
    const { done } = await it.next();
    if (done) break;
    tokens += 1;
  }
  ok(tokens >= 2, 'the running request completed');
  let secondText = '';
  for await (const chunk of second) secondText += chunk.choices.map((c) => c.text).join('');
  eq(secondText, await completionAlone('two', 20), 'the waiting request ran once the first finished');
}

async function auth() {
  const unauth = await fetch(`${v1}/models`);
  eq({ status: unauth.status, body: await unauth.json() },
    err(401, IR, 'invalid_api_key', null, 'missing API key: send it as the header "Authorization: Bearer <key>"'), 'no key');
  const wrong = new OpenAI({ baseURL: v1, apiKey: 'wrong', maxRetries: 0 });
  try {
    await wrong.completions.create({ model, prompt: 'x', max_tokens: 2 });
    fail('expected AuthenticationError');
  } catch (e) {
    ok(e instanceof OpenAI.AuthenticationError, `expected AuthenticationError, got ${e.constructor.name}`);
    eq([e.status, e.code, e.error.message], [401, 'invalid_api_key', 'incorrect API key provided'], 'wrong key');
  }
  eq((await client.models.list()).data[0].id, model, 'models with the key');
  eq((await client.completions.create({ model, prompt: 'x', max_tokens: 2, ...greedy })).usage.completion_tokens, 2, 'completion with the key');
  eq((await fetch(`${baseURL}/health`)).status, 200, '/health needs no key');
  eq((await post('/tokenize', { prompt: 'x' })).status, 200, '/tokenize needs no key');
}

const scenarios = {
  main: async () => {
    await basics();
    await concurrentStreams();
    await badInputsBesideALongStream();
    await disconnects();
  },
  queue: queueFull,
  auth,
};

try {
  if (!scenarios[scenario]) fail(`unknown scenario ${scenario}`);
  await scenarios[scenario]();
  console.log(`openai client ${scenario}: all checks passed`);
} catch (e) {
  console.error(`openai client ${scenario}: ${e.stack ?? e}`);
  process.exit(1);
}
