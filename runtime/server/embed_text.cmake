# Turns a text file into a C++ source defining `std::string_view <FUNCTION>()` in namespace
# <NAMESPACE> that returns its bytes.
#   cmake -DINPUT=page.html -DOUTPUT=page.cc -DNAMESPACE=llmrt::server -DFUNCTION=ChatPageHtml
#         -DHEADER=runtime/server/chat_page.h -P embed_text.cmake
# The bytes are written as hex escapes in string literals of at most 64 bytes each: no
# raw-string delimiter can collide with the content, and every compiler accepts the length.
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_length)
math(EXPR size "${hex_length} / 2")
set(body "")
set(offset 0)
while(offset LESS hex_length)
  string(SUBSTRING "${hex}" ${offset} 128 chunk)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "\\\\x\\1" chunk "${chunk}")
  string(APPEND body "    \"${chunk}\"\n")
  math(EXPR offset "${offset} + 128")
endwhile()
if(size EQUAL 0)
  set(body "    \"\"\n")
endif()
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT} by embed_text.cmake; do not edit.\n"
  "#include \"${HEADER}\"\n\n"
  "namespace ${NAMESPACE} {\n\n"
  "std::string_view ${FUNCTION}() {\n"
  "  static const char kBytes[] =\n${body};\n"
  "  return std::string_view(kBytes, ${size});\n"
  "}\n\n"
  "}  // namespace ${NAMESPACE}\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
