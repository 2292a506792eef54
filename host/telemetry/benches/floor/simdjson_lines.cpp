// The fastest JSON validation known, as a floor for the pipeline bench: every line of every
// file named is parsed by simdjson's DOM parser (which validates the whole line) on THREADS
// threads, and nothing is kept. Prints "MB/s lines malformed". Built by the bench with
//   g++ -O3 -march=native -std=c++17 simdjson_lines.cpp -lsimdjson -lpthread
// where Debian's libsimdjson-dev is installed.
#include <simdjson.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: simdjson_lines THREADS FILE...\n");
    return 2;
  }
  const int threads = std::stoi(argv[1]);
  const std::vector<std::string> files(argv + 2, argv + argc);
  std::atomic<size_t> next{0}, bytes{0}, lines{0}, malformed{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; t++) {
    workers.emplace_back([&] {
      simdjson::dom::parser parser;
      std::string buf;
      for (size_t i; (i = next++) < files.size();) {
        FILE* f = fopen(files[i].c_str(), "rb");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        buf.resize(ftell(f) + simdjson::SIMDJSON_PADDING);
        fseek(f, 0, SEEK_SET);
        const size_t size = fread(buf.data(), 1, buf.size() - simdjson::SIMDJSON_PADDING, f);
        fclose(f);
        bytes += size;
        for (size_t pos = 0; pos < size;) {
          size_t end = buf.find('\n', pos);
          if (end == std::string::npos || end > size) end = size;
          if (end > pos) {
            lines++;
            // Parsed in place, no copy: the bytes after a line (the next lines, or the
            // padding after the last) are the padding simdjson reads past its end.
            if (parser.parse(buf.data() + pos, end - pos, false).error()) malformed++;
          }
          pos = end + 1;
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  printf("%.1f %zu %zu\n", bytes / 1e6 / secs, lines.load(), malformed.load());
}
