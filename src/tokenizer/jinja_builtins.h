#pragma once
// Filters, tests, methods of str/list/dict, and global functions available to chat
// templates: those the DeepSeek, Qwen, Llama and Mistral templates call, with Python's
// semantics. Anything else is an error naming it and the template line.
#include <stdexcept>
#include <string>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace moe::jinja {

[[noreturn]] void runtime_error(int line, const std::string& msg);

// Thrown by functions, which do not know where they were called from; the interpreter
// turns it into an error that names the line of the call.
struct CallError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

Value apply_filter(const std::string& name, const Value& input, std::vector<Value>& args, Kwargs& kwargs, int line);
bool apply_test(const std::string& name, const Value& v, std::vector<Value>& args, int line);
// obj.name for a str, list or dict method, bound to obj; undefined when there is none.
Value method(const Value& obj, const std::string& name, int line);
// range, namespace, dict, raise_exception, strftime_now.
Kwargs global_functions();

// Python-style code point indexing of a UTF-8 string.
std::vector<std::string> code_points(const std::string& s);
// Python's index and slice rules on a sequence of length n (negatives count from the end).
bool normalize_index(int64_t& i, int64_t n);
std::vector<int64_t> slice_indices(const Value& start, const Value& stop, const Value& step, int64_t n, int line);

// Python str methods the filters share with the str type.
bool py_space(const std::string& code_point);
std::string strip(const std::string& s, const Value& chars, bool left, bool right);
std::vector<std::string> split(const std::string& s, const Value& sep, int64_t maxsplit, int line);
std::string replace_all(std::string s, const std::string& from, const std::string& to, int64_t count);
std::string ascii_case(std::string s, bool upper);
std::string title(const std::string& s);

}  // namespace moe::jinja
