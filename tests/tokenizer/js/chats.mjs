// Conversations the chat-template conformance test renders with each model's template.
// Each runs with add_generation_prompt off and on; some only fit one template (DeepSeek-V3
// wants a tool call's arguments as a string and its content null; Qwen3 takes either).

const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather for a city — in °C, with “quotes” and \\ backslash",
    parameters: {
      type: "object",
      properties: { city: { type: "string", description: "城市名" }, days: { type: "integer", minimum: 1, maximum: 7 } },
      required: ["city"],
    },
  },
};
const search = { type: "function", function: { name: "search", description: "Web search", parameters: { type: "object", properties: { q: { type: "string" } }, required: ["q"] } } };

const base = [
  { name: "single_user", messages: [{ role: "user", content: "Hello!" }] },
  { name: "system_user", messages: [{ role: "system", content: "You are a helpful assistant." }, { role: "user", content: "What is 2+2?" }] },
  {
    name: "multi_turn",
    messages: [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Hi, who are you?" },
      { role: "assistant", content: "I am an assistant." },
      { role: "user", content: "Tell me a joke\nabout cats." },
      { role: "assistant", content: "Why did the cat sit on the computer? To keep an eye on the mouse." },
      { role: "user", content: "Another one, in 中文 please 😀" },
    ],
  },
  { name: "unicode_and_whitespace", messages: [{ role: "user", content: "  leading spaces\ttabs\r\nCRLF 日本語 한국어 <b>&amp;</b> \"quotes\" 'single'  " }] },
  { name: "assistant_last", messages: [{ role: "user", content: "Say yes." }, { role: "assistant", content: "Yes." }] },
];

const deepseekOnly = [
  { name: "two_systems", messages: [{ role: "system", content: "First rule." }, { role: "system", content: "Second rule." }, { role: "user", content: "ok?" }] },
  {
    name: "tool_calls",
    messages: [
      { role: "user", content: "Weather in Paris and Tokyo?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [
          { type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } },
          { type: "function", function: { name: "get_weather", arguments: '{"city": "東京"}' } },
        ],
      },
      { role: "tool", content: '{"temp": 21}' },
      { role: "tool", content: '{"temp": 18}' },
      { role: "assistant", content: "Paris is 21°C, Tokyo 18°C." },
      { role: "user", content: "Thanks" },
    ],
  },
  {
    name: "tool_pending",
    messages: [
      { role: "user", content: "Search cats" },
      { role: "assistant", content: null, tool_calls: [{ type: "function", function: { name: "search", arguments: '{"q": "cats"}' } }] },
      { role: "tool", content: "Cats are great." },
    ],
  },
];

const qwenOnly = [
  {
    name: "tools_and_calls",
    tools: [weather, search],
    messages: [
      { role: "system", content: "You can call tools." },
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: "", tool_calls: [{ type: "function", function: { name: "get_weather", arguments: { city: "Paris", days: 2 } } }] },
      { role: "tool", content: '{"temp": 21, "sky": "clear"}' },
      { role: "assistant", content: "<think>\nThe tool said 21.\n</think>\n\nIt is 21°C and clear." },
      { role: "user", content: "And tomorrow?" },
    ],
  },
  {
    name: "tools_no_system",
    tools: [search],
    messages: [
      { role: "user", content: "Find news" },
      {
        role: "assistant",
        content: "Let me search.",
        tool_calls: [
          { type: "function", function: { name: "search", arguments: '{"q": "news"}' } },
          { function: { name: "search", arguments: { q: "more news" } } },
        ],
      },
      { role: "tool", content: "result one" },
      { role: "tool", content: "result two" },
    ],
  },
  {
    name: "reasoning_content",
    messages: [
      { role: "user", content: "2+2?" },
      { role: "assistant", content: "4", reasoning_content: "Adding two and two." },
      { role: "user", content: "3+3?" },
      { role: "assistant", content: "\n\n6", reasoning_content: "\nSix.\n" },
    ],
  },
  {
    name: "think_in_history",
    messages: [
      { role: "user", content: "Q1" },
      { role: "assistant", content: "<think>\nold reasoning\n</think>\n\nA1" },
      { role: "user", content: "<tool_response>\nignored as query\n</tool_response>" },
      { role: "assistant", content: "<think>r2</think>A2" },
    ],
  },
  { name: "system_later", messages: [{ role: "user", content: "hi" }, { role: "system", content: "late system" }, { role: "user", content: "again" }] },
];

function expand(list, template) {
  const out = [];
  for (const c of list) {
    for (const add_generation_prompt of [false, true]) {
      const context = { messages: c.messages, add_generation_prompt };
      if (c.tools) context.tools = c.tools;
      out.push({ name: `${c.name}/${add_generation_prompt ? "gen" : "nogen"}`, template, context });
    }
  }
  return out;
}

export const conversations = [
  ...expand(base, "deepseek_v3"),
  ...expand(deepseekOnly, "deepseek_v3"),
  ...expand(base, "qwen3"),
  ...expand(qwenOnly, "qwen3"),
  // Qwen3's switch for answering without thinking.
  { name: "no_thinking", template: "qwen3", context: { messages: base[1].messages, add_generation_prompt: true, enable_thinking: false } },
  { name: "thinking_on", template: "qwen3", context: { messages: base[1].messages, add_generation_prompt: true, enable_thinking: true } },
];
