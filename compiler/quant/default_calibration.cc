// The built-in AWQ calibration text: plain English of mixed registers (a children's story, a
// description, a dialogue, instructions), so the mean activation magnitudes reflect ordinary
// text rather than one style. Written for this project; it shares no sentence with the
// held-out evaluation text in tests/quant/data.
#include "compiler/quant/calibration.h"

namespace llmc::quant {

const char* DefaultCalibrationText() {
  return R"text(Tom was a small boy who lived on a farm with his grandfather. Every day he fed the chickens, brushed the old brown horse and carried water from the well. One morning he found a tiny kitten hiding in the barn. It was cold and hungry, so Tom gave it warm milk and a soft blanket. "Can we keep her?" he asked. His grandfather smiled and said yes, as long as Tom looked after her. The kitten grew big and strong, and she followed Tom everywhere he went.
The river runs through the valley from the mountains to the sea. In spring the water is high and fast, full of melted snow; in late summer it is slow and clear, and children swim in the shallow pools near the bridge. Farmers on both banks use it to water their fields of wheat and corn, and a small boat carries people and goods between the two villages.
"Where are you going?" asked Lucy. "To the shop," said Ben. "We need bread, apples and some cheese for lunch." Lucy picked up her coat. "Wait for me, I want to come too. Can we buy a cake for Dad's birthday?" Ben laughed. "Only if you help me carry the bags home."
To plant a tree, first choose a sunny place with good soil. Dig a hole twice as wide as the roots and just as deep. Put the tree in the middle, fill the hole with soil, and press it down gently with your hands. Water it well, and keep watering it every few days until it grows new leaves.
Once there was a little bird who could not sing. All the other birds sang beautiful songs in the morning, but when she opened her beak, only a quiet squeak came out. She felt sad and flew far away into the forest. There she met an old owl who told her that every voice is different. The next morning she tried again, and her small song made the flowers open and the sun shine a little brighter.
The library is open from nine in the morning until six in the evening. Books can be borrowed for three weeks, and you may renew them twice. Please return them on time so that other readers can enjoy them, and keep your voice low in the reading rooms.)text";
}

}  // namespace llmc::quant
