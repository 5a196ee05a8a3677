// The value model of the chat-template interpreter: the Python objects a Jinja template sees
// (None, bool, int, float, str, list, tuple, dict with insertion order, namespace, callables),
// plus jinja2's Undefined.
//
// Values are cheap to copy: lists, dicts and callables are shared through shared_ptr. Templates
// run in an immutable sandbox (as transformers' ImmutableSandboxedEnvironment), so lists and dicts
// are never changed after construction; only a namespace() is mutable, and it is shared by design
// (`set ns.x = ...` inside a loop is seen after the loop). A Value is not thread-safe when it holds
// a namespace; everything else is safe to read from several threads.
#ifndef LLMRT_TEMPLATE_VALUE_H_
#define LLMRT_TEMPLATE_VALUE_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace llmrt::jinja {

class Value;

// Arguments of a call: positional, then keyword (in call order).
struct CallArguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using Function = std::function<absl::StatusOr<Value>(const CallArguments&)>;

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict,
    kNamespace,
    kFunction,
  };
  using Items = std::vector<Value>;
  using Entries = std::vector<std::pair<Value, Value>>;

  // An undefined value: jinja2's default Undefined. `hint` is the message an error gives when the
  // template uses it in a way jinja2 refuses (attribute access, arithmetic, a call).
  Value() : kind_(Kind::kUndefined) {}
  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool value);
  static Value Int(int64_t value);
  static Value Float(double value);
  static Value String(std::string value);
  // A str marked safe (markupsafe's Markup), from |safe, |escape or |forceescape: printed as is,
  // but a plain str joined to it with + is HTML-escaped first, as Markup.__add__/__radd__ do
  // (Mistral's templates build tool calls as 'text' + (arguments|tojson|safe)).
  static Value Markup(std::string value);
  static Value List(Items items);
  static Value Tuple(Items items);
  // A tuple whose items are also attributes (Python's namedtuple; groupby's (grouper, list)).
  static Value NamedTuple(Items items, std::vector<std::string> field_names);
  // A dict with string keys, in the order given (a JSON object).
  static Value Object(std::initializer_list<std::pair<std::string, Value>> entries);
  static Value Dict(Entries entries);
  static Value Namespace(Entries entries);
  // `name` appears in repr() and in error messages.
  static Value Callable(std::string name, Function function);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  // Python's int: bool counts as int in arithmetic, as in Python.
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return kind_ == Kind::kString && markup_; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kTuple; }
  bool is_sequence_of_items() const { return is_list() || is_tuple(); }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool bool_value() const { return bool_; }
  int64_t int_value() const { return is_bool() ? (bool_ ? 1 : 0) : int_; }
  double float_value() const { return is_float() ? float_ : static_cast<double>(int_value()); }
  const std::string& string_value() const { return string_; }
  // The undefined value's error message.
  const std::string& undefined_hint() const { return string_; }
  const Items& items() const;
  // Dict and namespace entries.
  const Entries& entries() const;
  const std::string& function_name() const { return string_; }
  const Function& function() const;

  // Dict/namespace lookup; nullptr when absent (Python equality of keys).
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  // A named tuple's item by field name; nullptr for other values or an unknown name.
  const Value* Field(std::string_view name) const;
  // Namespace assignment (the one mutable kind); inserts or replaces.
  void SetAttribute(const std::string& name, Value value) const;
  // Drops a namespace's attributes. A namespace can hold itself (`set ns.me = ns`), a reference
  // cycle no shared_ptr frees; the renderer clears the namespaces a render created when it ends.
  void ClearAttributes() const;

  // Python truthiness (Undefined is false).
  bool Truthy() const;
  // Python str(): what `{{ value }}` prints. Undefined prints "".
  std::string Str() const;
  // Python repr().
  std::string Repr() const;
  // Python's type name as jinja2 uses it in messages ("dict", "str", "NoneType").
  std::string_view TypeName() const;
  // Python ==.
  bool Equals(const Value& other) const;

 private:
  Kind kind_;
  bool bool_ = false;
  bool markup_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::string string_;  // string value, undefined hint or function name
  std::shared_ptr<Items> items_;
  std::shared_ptr<Entries> entries_;
  std::shared_ptr<Function> function_;
  std::shared_ptr<const std::vector<std::string>> field_names_;  // named tuples only
};

// Python float repr(): the shortest string that round-trips ("0.1", "1e+20", "1e-05", "3.0").
std::string FloatRepr(double value);
// Python repr() of a str.
std::string StringRepr(std::string_view text);
// markupsafe.escape() of a str: & < > " ' as &amp; &lt; &gt; &#34; &#39;.
std::string HtmlEscape(std::string_view text);

struct JsonOptions {
  // json.dumps(indent=...): nullopt is the one-line form.
  std::optional<std::string> indent;
  // json.dumps(separators=(item, key)); unset: ", " / ": " without indent, "," / ": " with it.
  std::optional<std::string> item_separator;
  std::optional<std::string> key_separator;
  bool sort_keys = false;
  // Escape everything outside printable ASCII as \uXXXX (surrogate pairs above U+FFFF).
  bool ensure_ascii = false;
};
// json.dumps(value, ...) with the options above, as transformers' tojson filter (whose default is
// ensure_ascii=False). Undefined, callables and namespaces are not serializable, as in Python.
absl::StatusOr<std::string> ToJson(const Value& value, const JsonOptions& options);

}  // namespace llmrt::jinja

#endif  // LLMRT_TEMPLATE_VALUE_H_
