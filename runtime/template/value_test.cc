#include "runtime/template/value.h"

#include "gtest/gtest.h"

namespace llmrt::jinja {
namespace {

TEST(FloatReprTest, MatchesPythonRepr) {
  // Expected strings are Python 3's repr() of the same doubles.
  EXPECT_EQ(FloatRepr(0.5), "0.5");
  EXPECT_EQ(FloatRepr(3.0), "3.0");
  EXPECT_EQ(FloatRepr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FloatRepr(1e20), "1e+20");
  EXPECT_EQ(FloatRepr(1e16), "1e+16");
  EXPECT_EQ(FloatRepr(1e15), "1000000000000000.0");
  EXPECT_EQ(FloatRepr(1e-5), "1e-05");
  EXPECT_EQ(FloatRepr(0.0001), "0.0001");
  EXPECT_EQ(FloatRepr(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(FloatRepr(123.456), "123.456");
}

TEST(ValueTest, StrAndReprFollowPython) {
  const Value list =
      Value::List({Value::Int(1), Value::Float(2.5), Value::String("x"), Value::None(),
                   Value::Bool(true), Value::Object({{"a", Value::Tuple({Value::Int(1)})}})});
  EXPECT_EQ(list.Str(), "[1, 2.5, 'x', None, True, {'a': (1,)}]");
  EXPECT_EQ(Value::String("it's").Repr(), "\"it's\"");
  EXPECT_EQ(Value::String("a\"b'c").Repr(), "'a\"b\\'c'");
  EXPECT_EQ(Value().Str(), "");
}

TEST(ValueTest, EqualityAndTruthiness) {
  EXPECT_TRUE(Value::Int(1).Equals(Value::Float(1.0)));
  EXPECT_TRUE(Value::Bool(true).Equals(Value::Int(1)));
  EXPECT_FALSE(Value::String("1").Equals(Value::Int(1)));
  EXPECT_TRUE(Value::Object({{"a", Value::Int(1)}, {"b", Value::Int(2)}})
                  .Equals(Value::Object({{"b", Value::Int(2)}, {"a", Value::Int(1)}})));
  EXPECT_FALSE(Value::List({}).Truthy());
  EXPECT_FALSE(Value::String("").Truthy());
  EXPECT_TRUE(Value::String(" ").Truthy());
  EXPECT_FALSE(Value::Undefined("x").Truthy());
}

TEST(ToJsonTest, MatchesJsonDumpsWithoutAsciiEscapes) {
  const Value value = Value::Object({{"a", Value::List({Value::Int(1), Value::Int(2)})},
                                     {"b", Value::String("\xC3\xA9\n\"q\"\x01")},
                                     {"c", Value::None()},
                                     {"d", Value::Float(1.0)}});
  // json.dumps(v, ensure_ascii=False) and json.dumps(v, ensure_ascii=False, indent=2).
  EXPECT_EQ(*ToJson(value, {}),
            "{\"a\": [1, 2], \"b\": \"\xC3\xA9\\n\\\"q\\\"\\u0001\", \"c\": null, \"d\": 1.0}");
  JsonOptions indented;
  indented.indent = "  ";
  EXPECT_EQ(*ToJson(value, indented),
            "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": \"\xC3\xA9\\n\\\"q\\\"\\u0001\",\n  "
            "\"c\": null,\n  \"d\": 1.0\n}");
  EXPECT_FALSE(ToJson(Value::Undefined("x"), {}).ok());
}

}  // namespace
}  // namespace llmrt::jinja
