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

# kcache_corpus_archs(ARCHS INDEX PER_ENTRY NAME NAMED OUT): the archs of the corpus entry NAME,
# on row INDEX (0-based), that are built and tested, in ARCHS' order. With
# KCACHE_CORPUS_ARCHS=all, or when the entry lists no more than PER_ENTRY archs: all of them.
# Otherwise PER_ENTRY archs spread evenly over its list, starting at INDEX modulo its length, so
# that consecutive entries take turns and every arch the corpus names is built for some entries
# (with PER_ENTRY 2 and a list of wave64 archs then wave32 ones, as tests/data/hip lists them,
# each entry gets one of each); and every arch A for which NAMED holds "NAME.A" (bitcode a test
# reads by name).
function(kcache_corpus_archs archs index per_entry name named out)
  list(LENGTH archs n)
  if(KCACHE_CORPUS_ARCHS STREQUAL "all" OR n LESS_EQUAL per_entry)
    set(${out} "${archs}" PARENT_SCOPE)
    return()
  endif()
  set(picked "")
  math(EXPR last "${per_entry} - 1")
  foreach(j RANGE ${last})
    math(EXPR at "(${index} + ${j} * ${n} / ${per_entry}) % ${n}")
    list(GET archs ${at} arch)
    list(APPEND picked "${arch}")
  endforeach()
  set(built "")
  foreach(arch IN LISTS archs)
    if("${arch}" IN_LIST picked OR "${name}.${arch}" IN_LIST named)
      list(APPEND built "${arch}")
    endif()
  endforeach()
  set(${out} "${built}" PARENT_SCOPE)
endfunction()
