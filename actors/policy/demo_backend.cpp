#include "actors/policy/demo_backend.hpp"

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <iterator>

#include "messages/tool_names.hpp"

namespace cuda_agent::policy {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

[[noreturn]] void fail(const fs::path& file, const std::string& what) {
  throw policy_error{"demonstration " + file.string() + ": " + what};
}

std::string string_field(const json& doc, const char* key, const fs::path& file,
                         const std::string& where) {
  const auto it = doc.find(key);
  if (it == doc.end() || !it->is_string())
    fail(file, where + "\"" + key + "\" must be a string");
  return it->get<std::string>();
}

// Replaces every {"$file": "relative/path"} inside `value` by that file's text.
void resolve_files(json& value, const fs::path& dir, const fs::path& file, const std::string& where) {
  if (value.is_object() && value.size() == 1 && value.contains("$file")) {
    const auto& name = value["$file"];
    if (!name.is_string()) fail(file, where + ": \"$file\" must be a relative path");
    const fs::path relative{name.get<std::string>()};
    const auto normal = relative.lexically_normal();
    if (relative.empty() || relative.is_absolute() || *normal.begin() == "..")
      fail(file, where + ": \"$file\": \"" + relative.string() +
                     "\" must be a path inside the demo folder");
    std::ifstream in(dir / normal, std::ios::binary);
    if (!in) fail(file, where + ": \"$file\": " + (dir / normal).string() + " cannot be read");
    value = std::string(std::istreambuf_iterator<char>(in), {});
    return;
  }
  if (value.is_object() || value.is_array())
    for (auto& item : value) resolve_files(item, dir, file, where);
}

}  // namespace

demonstration load_demonstration(const fs::path& demo_json) {
  std::ifstream in(demo_json);
  if (!in) fail(demo_json, "cannot be read");
  const auto doc = json::parse(in, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) fail(demo_json, "is not a JSON object");

  demonstration demo;
  demo.dir = demo_json.parent_path();
  demo.task_id = string_field(doc, "task_id", demo_json, "");
  demo.device = string_field(doc, "device", demo_json, "");
  if (demo.device != "cpu" && demo.device != "cuda")
    fail(demo_json, "\"device\" must be \"cpu\" or \"cuda\", got \"" + demo.device + "\"");
  demo.final = string_field(doc, "final", demo_json, "");
  const auto steps = doc.find("steps");
  if (steps == doc.end() || !steps->is_array()) fail(demo_json, "\"steps\" must be an array");
  for (size_t i = 0; i < steps->size(); ++i) {
    const auto& raw = (*steps)[i];
    const std::string where = "steps[" + std::to_string(i) + "]";
    if (!raw.is_object()) fail(demo_json, where + " must be an object");
    demo_step step;
    step.thought = string_field(raw, "thought", demo_json, where + ": ");
    step.tool = string_field(raw, "tool", demo_json, where + ": ");
    const auto& tools = tool_names();
    if (std::find(tools.begin(), tools.end(), step.tool) == tools.end())
      fail(demo_json, where + ": unknown tool \"" + step.tool + "\"");
    if (!raw.contains("arguments") || !raw["arguments"].is_object())
      fail(demo_json, where + ": \"arguments\" must be an object");
    step.arguments = raw["arguments"];
    resolve_files(step.arguments, demo.dir, demo_json, where);
    demo.steps.push_back(std::move(step));
  }
  return demo;
}

fs::path find_demonstration(const fs::path& root, const std::string& task_id) {
  if (task_id.empty() || fs::path{task_id}.filename() != task_id)
    throw policy_error{"demo: the request names no usable task id ('" + task_id +
                       "'); the episode must set policy_request.task_id"};
  const auto direct = root / task_id / "demo.json";
  std::error_code ec;
  if (fs::is_regular_file(direct, ec)) return direct;
  std::vector<fs::path> found;
  for (const auto& set : fs::directory_iterator(root, ec)) {
    const auto candidate = set.path() / task_id / "demo.json";
    if (set.is_directory() && fs::is_regular_file(candidate, ec)) found.push_back(candidate);
  }
  if (found.empty())
    throw policy_error{"demo: no demonstration for task '" + task_id + "' under " + root.string() +
                       " (looked for <dir>/" + task_id + "/demo.json and <dir>/<set>/" + task_id +
                       "/demo.json); check policy.demo_dir"};
  if (found.size() > 1)
    throw policy_error{"demo: task '" + task_id + "' has demonstrations in several sets (" +
                       found[0].string() + ", " + found[1].string() +
                       "); set policy.demo_dir to one set's folder"};
  return found[0];
}

policy_response demo_turn(const demonstration& demo, size_t step, const policy_request& request) {
  if (step > demo.steps.size())
    throw policy_error{"demo: the demonstration " + (demo.dir / "demo.json").string() +
                       " has " + std::to_string(demo.steps.size()) +
                       " steps and a final answer, but turn " + std::to_string(step) +
                       " was asked for (the episode went on after the agent was done)"};
  policy_response out;
  out.episode_id = request.episode_id;
  out.turn = request.turn;
  out.context_action = "none";
  if (step == demo.steps.size()) {
    out.content = demo.final;
    out.finish_reason = "stop";
    return out;
  }
  const auto& s = demo.steps[step];
  out.content = s.thought;
  out.finish_reason = "tool_calls";
  // Fresh per episode and turn, as a model's ids are; never reused within an episode.
  out.tool_calls.push_back(
      {"demo-" + request.episode_id + "-" + std::to_string(step), s.tool, s.arguments.dump(), ""});
  return out;
}

demo_backend::demo_backend(fs::path root) : root_{std::move(root)} {
  std::error_code ec;
  if (!fs::is_directory(root_, ec))
    throw config_error{"policy.demo_dir '" + root_.string() +
                       "' is not a directory; point it at corpus/demos or one set inside it"};
}

demo_backend::demo_backend(const policy_settings& settings) : demo_backend{settings.demo_dir} {
  if (settings.model_dir.empty()) return;
  const auto file = settings.model_dir / "tokenizer.json";
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    throw config_error{"the demo backend answers in the tokens of setting 'policy.model_dir', "
                       "but " + file.string() + " is not there; point policy.model_dir at a Hugging Face checkpoint "
                       "directory, or leave it empty for text-only demonstrations"};
  tokens_ =
      episode_token_ledger::load(settings.model_dir, settings.chat_format, settings.tools_dir);
}

void demo_backend::add_tokens(const policy_request& request, policy_response& response) {
  episode_token_ledger::prompt prompt;
  model::chat_render turn;
  try {
    prompt = tokens_->prompt_for(request);
    auto messages = request.messages;
    messages.push_back({"assistant", response.content, "", response.tool_calls});
    turn = model::render(tokens_->format(), messages, tokens_->tools(), request.tools,
                         /*add_generation_prompt=*/false);
  } catch (const model::model_error& e) {
    throw policy_error{std::string{"demo: the chat format cannot render the conversation: "} +
                       e.what()};
  }
  std::string generated;
  for (const auto& span : turn.spans)
    if (span.generated && span.message == static_cast<int32_t>(request.messages.size()))
      generated.append(turn.text, span.begin, span.end - span.begin);
  const auto completion = tokens_->tokenizer().encode(generated, /*add_special_tokens=*/false);

  const auto new_from = prompt.tokens.begin() + static_cast<std::ptrdiff_t>(prompt.new_from);
  response.prompt_token_ids.assign(new_from, prompt.tokens.end());
  response.token_ids.assign(completion.begin(), completion.end());
  response.logprobs.assign(completion.size(), 0.0f);
  response.weight_version = -1;
  response.prompt_tokens = static_cast<int32_t>(prompt.tokens.size());
  response.completion_tokens = static_cast<int32_t>(completion.size());
  if (prompt.rerendered) response.context_action = "rerendered";
  tokens_->remember(request, std::move(prompt.tokens), completion);
}

policy_response demo_backend::complete(const policy_request& request) {
  std::shared_ptr<const demonstration> demo;
  {
    std::lock_guard<std::mutex> lock{mutex_};
    auto& slot = loaded_[request.task_id];
    if (!slot) {
      try {
        const auto file = find_demonstration(root_, request.task_id);
        auto loaded = std::make_shared<demonstration>(load_demonstration(file));
        if (loaded->task_id != request.task_id)
          fail(file, "\"task_id\" is \"" + loaded->task_id + "\" but the folder is for task \"" +
                         request.task_id + "\"");
        slot = std::move(loaded);
      } catch (...) {
        loaded_.erase(request.task_id);
        throw;
      }
    }
    demo = slot;
  }
  const auto step = static_cast<size_t>(
      std::count_if(request.messages.begin(), request.messages.end(),
                    [](const chat_message& m) { return m.role == "assistant"; }));
  auto response = demo_turn(*demo, step, request);
  if (tokens_) add_tokens(request, response);
  return response;
}

}  // namespace cuda_agent::policy
