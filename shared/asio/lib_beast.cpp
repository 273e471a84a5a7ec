// Beast compiled once for the whole project (BOOST_BEAST_SEPARATE_COMPILATION).
#include <boost/beast/src.hpp>
