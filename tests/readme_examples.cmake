# Fails when a document (README.md, docs/c-api.md) does not show an example source verbatim (the examples are
# compiled; the document must not drift from them). Usage: cmake -DREADME=path -DEXAMPLES="a.cpp;b.cpp" -P
# readme_examples.cmake
file(READ "${README}" readme)
get_filename_component(document "${README}" NAME)
foreach(example IN LISTS EXAMPLES)
  file(READ "${example}" source)
  string(FIND "${readme}" "${source}" position)
  if(position EQUAL -1)
    message(FATAL_ERROR "${document} does not contain ${example} verbatim: copy the file into its code block")
  endif()
endforeach()
message(STATUS "${document} shows every example verbatim")
