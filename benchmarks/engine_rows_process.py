"""The bench's engine rows (`aayn bench`'s CTranslate2 and ONNX arms against aayn's search, on the quick bench's
150-step demo-shaped model, or `--model FOLDER`: the demo job's, say) with each torch-free engine in a process of its
own (what the bench does) and, for comparison, in the bench's own process beside torch (what it did before):
`--rounds` alternations, the rows printed as JSON lines. Run alone on an idle machine."""

import argparse
import json

from aayn.bench import decoding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--model", help="a saved English -> French aayn folder (default: a 150-step model)")
    args = parser.parse_args()
    setup, _ = decoding.decoding_rows(quick=True, model_path=args.model)
    own_process = decoding.opened_engine
    in_process = lambda entry, folder, device: entry.open([str(folder)], [folder.name], device, None)
    for round_ in range(args.rounds):
        for where, opener in (("own process", own_process), ("this process", in_process)):
            decoding.opened_engine = opener
            for row in decoding.engine_decoding_rows(setup, quick=True):
                speeds = {arm: round(row[arm]["speed_vs_aayn"], 2) for arm in row if isinstance(row[arm], dict)}
                print(json.dumps({"round": round_, "engines in": where, "row": row["name"], "speed_vs_aayn": speeds}))


if __name__ == "__main__":
    main()
