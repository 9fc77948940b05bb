# Fails when README.md does not show an example source verbatim (the examples are compiled; the README must not
# drift from them). Usage: cmake -DREADME=path -DEXAMPLES="a.cpp;b.cpp" -P readme_examples.cmake
file(READ "${README}" readme)
foreach(example IN LISTS EXAMPLES)
  file(READ "${example}" source)
  string(FIND "${readme}" "${source}" position)
  if(position EQUAL -1)
    message(FATAL_ERROR "README.md does not contain ${example} verbatim: copy the file into its code block")
  endif()
endforeach()
message(STATUS "README.md shows every example verbatim")
