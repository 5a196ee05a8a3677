# Smoke run of `llmrt bench --json` on stories260K: every thread count gives one JSON line with
# the documented fields, each a positive number. No upper bound on mbu: stories260K's 1 MB of
# weights stay in cache, so its decode can beat DRAM bandwidth. Timings are never checked.
#
#   cmake -DLLMC=... -DLLMRT=... -DMODEL_DIR=... -DMOE_MODEL_DIR=... -DWORK_DIR=...
#         -P bench_smoke.cmake
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(plan "${WORK_DIR}/stories260K.plan")

function(compile_plan model plan)
  execute_process(COMMAND "${LLMC}" compile "${model}" -o "${plan}" --quiet
    RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "llmc compile ${model} failed (${rc}): ${err}")
  endif()
endfunction()
compile_plan("${MODEL_DIR}" "${plan}")

# A private bandwidth cache and a 64 MiB buffer: the smoke run must not touch ~/.cache nor
# spend a second reading 1 GiB.
set(ENV{LLMRT_BANDWIDTH_CACHE} "${WORK_DIR}/bandwidth.txt")
execute_process(
  COMMAND "${LLMRT}" bench "${plan}" -p 16 -n 4 -t 1,2 --reps 1 --bandwidth-mib 64 --json
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "llmrt bench failed (${rc}): ${err}")
endif()

string(STRIP "${out}" out)
string(REPLACE "\n" ";" lines "${out}")
list(LENGTH lines count)
if(NOT count EQUAL 2)
  message(FATAL_ERROR "expected 2 JSON lines (threads 1 and 2), found ${count}:\n${out}")
endif()
set(expected_threads 1 2)
foreach(index RANGE 1)
  list(GET lines ${index} line)
  list(GET expected_threads ${index} want)
  string(JSON threads ERROR_VARIABLE json_error GET "${line}" threads)
  if(json_error OR NOT threads EQUAL want)
    message(FATAL_ERROR "line ${index}: threads: expected ${want}, found '${threads}' "
                        "${json_error}\n${line}")
  endif()
  foreach(field pp_tok_s tg_tok_s ms_per_token peak_rss_bytes mbu load_to_first_token_ms)
    string(JSON value ERROR_VARIABLE json_error GET "${line}" ${field})
    string(JSON type ERROR_VARIABLE type_error TYPE "${line}" ${field})
    if(json_error OR NOT type STREQUAL "NUMBER" OR NOT value GREATER 0)
      message(FATAL_ERROR "line ${index}: field ${field}: expected a positive number, found "
                          "'${value}' ${json_error}\n${line}")
    endif()
  endforeach()
endforeach()

# --batch on a MoE fixture (8 experts, top-2, one MoE layer): the sessions decode different
# tokens, so a step's tokens choose more experts than one token's two. Sessions decoding the
# same tokens (what --batch once ran) would choose exactly 2.
set(moe_plan "${WORK_DIR}/qwen3_moe.plan")
compile_plan("${MOE_MODEL_DIR}" "${moe_plan}")
execute_process(
  COMMAND "${LLMRT}" bench "${moe_plan}" -p 0 -n 8 -t 1 --reps 1 --batch 8 --bandwidth-mib 64
          --json
  RESULT_VARIABLE rc OUTPUT_VARIABLE moe_out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "llmrt bench --batch 8 failed (${rc}): ${err}")
endif()
string(JSON active ERROR_VARIABLE json_error GET "${moe_out}" moe_active_experts)
if(json_error OR NOT active GREATER 2.5)
  message(FATAL_ERROR "--batch 8: moe_active_experts: expected more than one token's 2 experts "
                      "per layer and step, found '${active}' ${json_error}\n${moe_out}")
endif()

if(NOT EXISTS "${WORK_DIR}/bandwidth.txt")
  message(FATAL_ERROR "the bandwidth cache ${WORK_DIR}/bandwidth.txt was not written")
endif()
message(STATUS "llmrt bench smoke run ok:\n${out}")
