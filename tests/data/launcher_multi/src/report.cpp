#include <cstdio>

void report(const char* label, double value) { std::printf("%s: %g\n", label, value); }
