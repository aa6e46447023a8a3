# kcache_corpus_lines(TSV OUT): the rows of a corpus list (tests/data/*/corpus.tsv) as a CMake
# list, one element per row, without the header, blank lines and '#' comments. A ';' in the
# free-text notes would split a CMake list, so it becomes ',' (no rule reads the notes).
function(kcache_corpus_lines tsv out)
  file(READ "${tsv}" text)
  string(REPLACE ";" "," text "${text}")
  string(REPLACE "\r" "" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  list(POP_FRONT lines)  # header
  list(FILTER lines EXCLUDE REGEX "^(#.*)?$")
  set(${out} "${lines}" PARENT_SCOPE)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${tsv}")  # configure again when it changes
endfunction()
