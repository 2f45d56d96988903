// The main job in C++17 with the header-only wrapper dsv4/dsv4.hpp: greedy
// generation from BOS + the prompt, streamed to stdout.
//   dsv4-generate-cpp [MODEL_DIR] [PROMPT]     (default: build/models/dsv4-tiny)
#include <dsv4/dsv4.hpp>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

int main(int argc, char **argv) {
  const std::string dir = argc > 1 ? argv[1] : "build/models/dsv4-tiny";
  const std::string prompt = argc > 2 ? argv[2] : "Every evening the old lamplighter";
  try {
    dsv4_engine_params params = dsv4::engine_params();
    params.max_sequences = 1;
    dsv4::engine engine = dsv4::engine::from_dir(dir, params);
    dsv4::tokenizer tok(dir);
    dsv4::token_stream out(tok, /*skip_special=*/true);
    std::vector<int32_t> ids = tok.encode(prompt);
    ids.insert(ids.begin(), tok.bos());  // the model input starts with BOS
    dsv4::sequence seq = engine.new_sequence();
    int32_t next = seq.prefill(ids);
    for (int n = 0; n < 64 && next != tok.eos(); n++) {
      std::cout << out.push(next) << std::flush;
      if (n + 1 < 64) next = seq.decode(next);
    }
    std::cout << out.flush() << '\n';
  } catch (const dsv4::error &e) {  // status and the library's message
    std::cerr << "dsv4-generate-cpp: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
